"""What the installed vLLM accepts, and how to build its layers (through :mod:`probe.versions`).

Two layers, both free of torch at import time:

* **static** (parent side, no import of vLLM): locate the installed ``vllm`` package with
  ``importlib.util.find_spec`` / ``importlib.metadata`` and read the accepted values out of its
  *source* with ``ast`` (``MoEBackend = Literal[...]`` in ``vllm/config/kernel.py``, the members of
  ``AttentionBackendEnum`` in ``vllm/v1/attention/backends/registry.py`` or the older
  ``vllm/attention/backends/registry.py``).  The planner uses this so it never imports vLLM/torch.
* **runtime** (child side, vLLM imported): the truth — ``typing.get_args(vllm.config.kernel.MoEBackend)``,
  ``AttentionBackendEnum.__members__``, FA versions available, compiled module names, and the
  FusedMoE layer factory (``FusedMoEFactory`` in 0.33, ``FusedMoE(...)`` factory function in 0.24-0.32).

Where a vLLM release keeps these things is :func:`probe.versions.layout_for` (one
:class:`~probe.versions.VllmLayout` per range of releases); everything here looks names up through it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probe.versions import layout_for

log = logging.getLogger(__name__)


def known_moe_backends() -> tuple[str, ...]:
    """Every --moe-backend value of any vLLM release the backend catalog knows (0.18.1 .. 0.33.0).

    Used only when the installed vLLM's source cannot be read; the child then reports `skipped`
    for a value its vLLM does not accept.
    """
    from probe.catalog.backends import catalog

    return tuple(catalog().names("moe"))


def default_attention_backends(mla: bool = False) -> list[str]:
    """The attention backends probed on NVIDIA when the installed vLLM's enum cannot be read: the
    backend catalog's records (MLA ones only for MLA models)."""
    from probe.catalog.backends import catalog

    return list(dict.fromkeys(b.name for b in catalog().records("attention") if b.mla == mla))


# ----------------------------------------------------------------------------------------------
# static side: read the installed vLLM's source, import nothing of it
# ----------------------------------------------------------------------------------------------


@dataclass
class StaticVllmInfo:
    """What the parent can learn about the installed vLLM without importing it."""

    installed: bool
    version: str | None = None
    root: str | None = None
    moe_backends: list[str] | None = None  # None: this vLLM has no --moe-backend
    attention_backends: list[str] = field(default_factory=list)
    fa_versions_declared: list[int] = field(default_factory=list)
    source: str = "none"  # "source" (read from files) or "none"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def find_vllm_root(search_path: list[str] | None = None) -> Path | None:
    """Directory of the ``vllm`` package, found without importing it."""
    if search_path is not None:
        for entry in search_path:
            cand = Path(entry) / "vllm"
            if (cand / "__init__.py").is_file():
                return cand
        return None
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _read_version(root: Path) -> str | None:
    vf = root / "_version.py"
    if vf.is_file():
        m = re.search(r"""(?:__version__|version)\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", vf.read_text())
        if m:
            return m.group(1)
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def literal_values_from_source(path: Path, name: str) -> list[str] | None:
    """``NAME = Literal["a", "b"]`` (or ``NAME: TypeAlias = Literal[...]``) in a file -> its values."""
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if not (isinstance(target, ast.Name) and target.id == name and isinstance(value, ast.Subscript)):
            continue
        sl = value.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        out = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return out or None
    return None


def enum_members_from_source(path: Path, class_name: str) -> list[str] | None:
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            names: list[str] = []
            for stmt in node.body:
                targets = (
                    stmt.targets
                    if isinstance(stmt, ast.Assign)
                    else ([stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else [])
                )
                for t in targets:
                    if isinstance(t, ast.Name) and t.id.isupper():
                        names.append(t.id)
            return names
    return None


def _module_file(root: Path, module: str) -> Path:
    parts = module.split(".")[1:]  # drop leading 'vllm'
    return root.joinpath(*parts).with_suffix(".py")


def static_info(search_path: list[str] | None = None) -> StaticVllmInfo:
    """Accepted values read from the installed vLLM's source (no import of vLLM or torch)."""
    root = find_vllm_root(search_path)
    if root is None:
        return StaticVllmInfo(installed=False)
    version = _read_version(root) or "0"
    layout = layout_for(version)
    info = StaticVllmInfo(installed=True, version=version, root=str(root), source="source")
    if layout.moe_backend_module:
        vals = literal_values_from_source(_module_file(root, layout.moe_backend_module), "MoEBackend")
        info.moe_backends = [v for v in vals if v != "auto"] if vals else None
    for mod in layout.attention_enum_modules:
        members = enum_members_from_source(_module_file(root, mod), "AttentionBackendEnum")
        if members:
            info.attention_backends = members
            break
    fa = literal_values_from_attention_config(root / "config" / "attention.py")
    info.fa_versions_declared = fa
    return info


def literal_values_from_attention_config(path: Path) -> list[int]:
    """``flash_attn_version: Literal[2, 3, 4] | None`` in vllm/config/attention.py -> [2, 3, 4]."""
    if not path.is_file():
        return []
    m = re.search(r"flash_attn_version\s*:\s*Literal\[([0-9,\s]+)\]", path.read_text())
    return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []


def probed_attention_backends(members: list[str], mla: bool = False) -> list[str]:
    """Members worth probing on NVIDIA for a decoder model (MLA ones only for MLA models): all but
    those the backend catalog does not cover (ROCm / XPU / CPU, sparse and model-specific variants,
    multimodal-prefix and quantized-KV-cache backends: its ``not_covered``, each with the reason)."""
    from probe.catalog.backends import catalog

    cat = catalog()
    out = []
    for name in members:
        if cat.gap("attention", name) is not None:
            continue
        rec = cat.find("attention", name)
        if (rec.mla if rec is not None else name.endswith("_MLA")) == mla:
            out.append(name)
    return out


# ----------------------------------------------------------------------------------------------
# runtime side: called in the child, vLLM imported
# ----------------------------------------------------------------------------------------------


def runtime_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "0"))


def runtime_moe_backends() -> tuple[list[str] | None, str]:
    """(accepted --moe-backend values without 'auto', vLLM version); None if this vLLM has no flag."""
    import typing

    version = runtime_version()
    layout = layout_for(version)
    if layout.moe_backend_module is None:
        return None, version
    try:
        mod = importlib.import_module(layout.moe_backend_module)
    except ImportError:
        return None, version
    lit = getattr(mod, "MoEBackend", None)
    if lit is None:
        return None, version
    return [v for v in typing.get_args(lit) if v != "auto"], version


def moe_backend_skip_reason(backend: str) -> str | None:
    """None if the installed vLLM accepts ``backend``; else a reason for a `skipped` outcome."""
    accepted, version = runtime_moe_backends()
    if accepted is None:
        switches = ", ".join(layout_for(version).moe_env_switches) or "env-var switches"
        return (
            f"vLLM {version} has no --moe-backend; its MoE kernel is chosen by env-var switches "
            f"({switches}), not probed per backend"
        )
    if backend not in accepted:
        return (
            f"--moe-backend {backend!r} is not accepted by vLLM {version} (accepted: {', '.join(accepted)})"
        )
    return None


def attention_enum() -> Any:
    layout = layout_for(runtime_version())
    last: Exception | None = None
    for mod in layout.attention_enum_modules:
        try:
            return importlib.import_module(mod).AttentionBackendEnum
        except (ImportError, AttributeError) as exc:
            last = exc
    raise ImportError(f"AttentionBackendEnum not found in {layout.attention_enum_modules}: {last}")


def runtime_attention_backends() -> list[str]:
    return list(attention_enum().__members__)


def fa_versions_available() -> dict[int, str | None]:
    """{2: None, 3: None, 4: 'reason'} — None = supported here, str = why not."""
    out: dict[int, str | None] = {}
    try:
        fai = importlib.import_module("vllm.vllm_flash_attn.flash_attn_interface")
    except Exception as exc:  # the module itself imports compiled code
        return {v: f"vllm.vllm_flash_attn unavailable: {type(exc).__name__}: {exc}" for v in (2, 3, 4)}
    reason_fn = getattr(fai, "fa_version_unsupported_reason", None)
    ok_fn = getattr(fai, "is_fa_version_supported", None)
    for v in (2, 3, 4):
        try:
            if reason_fn is not None:
                out[v] = reason_fn(v)
            elif ok_fn is not None:
                out[v] = None if ok_fn(v) else "not supported (no reason given by this vLLM)"
            else:
                out[v] = "this vLLM has no FA version query"
        except Exception as exc:
            out[v] = f"{type(exc).__name__}: {exc}"
    return out


def compiled_module_names() -> tuple[str, ...]:
    return layout_for(runtime_version()).compiled_modules


def fused_moe_factory() -> Any:
    """The callable that builds one MoE layer (MoERunner) in the installed vLLM."""
    fm = importlib.import_module("vllm.model_executor.layers.fused_moe")
    for name in layout_for(runtime_version()).moe_factory_names:
        fn = getattr(fm, name, None)
        if fn is not None:
            return fn
    raise ImportError(
        f"vllm.model_executor.layers.fused_moe has none of {layout_for(runtime_version()).moe_factory_names}"
    )


def quant_config_class(name: str) -> Any:
    from vllm.model_executor.layers.quantization import get_quantization_config

    return get_quantization_config(name)


# Messages with which vLLM's MoE oracles / attention selector refuse a configuration cleanly.
REFUSAL = re.compile(
    r"is not supported for|does not support the deployment|is disabled for this configuration|"
    r"No \S+ MoE backend supports|not valid for this configuration|kernel does not support|"
    r"not supported on|is not supported by|Unsupported .* backend|requires .*(capability|SM|sm_)"
)


def is_refusal(exc: BaseException) -> bool:
    return isinstance(exc, ValueError | NotImplementedError) and bool(REFUSAL.search(str(exc)))
