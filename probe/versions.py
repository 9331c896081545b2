"""vLLM versions, and where each vLLM release keeps what probe uses: the one version module.

Standard library only. It is imported by the parent (the planner, ``recommend``'s flag spelling,
``probe predict``), by the sandboxed probes, and by the oracle child, which runs inside the image's own
Python where ``probe``'s dependencies may be missing (it reaches this file through a ``probe`` link).

* :func:`parse_version` / :func:`release_line` read a version string the way every part of probe does.
* :class:`VllmLayout` says, for the releases from ``since`` on, where the probes find vLLM's pieces
  (``--moe-backend`` literal, attention enum, compiled modules, the MoE layer factory) and where the
  oracle finds vLLM's own selection code (:data:`ORACLE_LAYOUT`, for the release lines it was read
  from); :func:`layout_for` picks the layout of a version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_VERSION = re.compile(r"^\s*v?(\d+)((?:\.\d+)*)")


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """'0.26.0' / 'v0.26' / '0.33.0rc1+cu130' / '0.11.0.dev12' -> (0, 26, 0) ... (the numeric release
    parts, at least three; a pre-release or local suffix is dropped); not a version -> None."""
    if not text:
        return None
    m = _VERSION.match(str(text).split("+", 1)[0])
    if not m:
        return None
    parts = [int(m.group(1))] + [int(x) for x in m.group(2).split(".") if x]
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


def release_line(text: str | None) -> str | None:
    """'0.33.0' / '0.33.1.dev3+g1234' / '0.26.0+cu130' -> '0.33' / '0.26'; not a version -> None."""
    v = parse_version(text)
    return f"{v[0]}.{v[1]}" if v else None


#: a full version as packages publish them (PEP 440 subset): release, pre-release, post, dev, local
_FULL = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)+)(?:(?P<pre>a|b|rc)(?P<pre_n>\d+))?(?:\.post(?P<post>\d+))?"
    r"(?:\.dev(?P<dev>\d+))?(?:\+[A-Za-z0-9.]+)?$"
)
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}


def version_key(text: str | None) -> tuple[tuple[int, ...], int, int, int] | None:
    """A sort key that orders full versions the way pip does: ``0.12.0.dev3`` < ``0.12.0rc1`` <
    ``0.12.0`` < ``0.12.0.post1`` < ``0.12.1`` (a local part ``+cu130`` is ignored). At least
    ``major.minor``; anything else (``13``, ``0.6.x``, ``main``, ``nightly+g1234``) -> None."""
    m = _FULL.match(str(text or "").strip())
    if not m:
        return None
    release = tuple(int(x) for x in m.group("release").split("."))
    release = release + (0,) * (3 - len(release)) if len(release) < 3 else release
    dev = int(m.group("dev")) if m.group("dev") is not None else None
    if m.group("pre"):
        pre = _PRE_RANK[m.group("pre")] * 100_000 + int(m.group("pre_n"))
    else:
        pre = -1 if dev is not None and m.group("post") is None else 10**9  # X.Y.devN sorts before X.Y a1
    post = int(m.group("post")) if m.group("post") is not None else -1
    return release, pre, post, dev if dev is not None else 10**9


def at_least(version: str | None, since: str | None) -> bool:
    """``version`` is ``since`` or newer (False when either is not a version)."""
    a, b = parse_version(version), parse_version(since)
    return a is not None and b is not None and a >= b


# ---- the oracle's view: vLLM's own selection code, per release line ----

_FUSED = "vllm.model_executor.layers.fused_moe"
_QUTILS = "vllm.model_executor.layers.quantization.utils.quant_utils"

_ATTENTION: dict[str, str] = {
    "selector_config": "vllm.v1.attention.selector:AttentionSelectorConfig",
    "platform": "vllm.platforms.cuda:NonNvmlCudaPlatform",
    "priorities": "vllm.platforms.cuda:_get_backend_priorities",
    "capability": "vllm.platforms.interface:DeviceCapability",
    "backend_enum": "vllm.v1.attention.backends.registry:AttentionBackendEnum",
    "fa_version": "vllm.v1.attention.backends.fa_utils:get_flash_attn_version",
}

_MOE: dict[str, Any] = {
    "config": f"{_FUSED}.config:FusedMoEConfig",
    "parallel_config": f"{_FUSED}.config:FusedMoEParallelConfig",
    "routing_type": f"{_FUSED}.config:get_routing_method_type",
    "routing_enum": f"{_FUSED}.config:RoutingMethodType",
    "activation": f"{_FUSED}.activation:MoEActivation",
    "backend_literal": "vllm.config.kernel:MoEBackend",
    "quants": {
        "bf16": {
            "select": f"{_FUSED}.oracle.unquantized:select_unquantized_moe_backend",
            "map": f"{_FUSED}.oracle.unquantized:map_unquantized_backend",
            "kernels": f"{_FUSED}.oracle.unquantized:backend_to_kernel_cls",
            "cite": "unquantized_fused_moe_method.py UnquantizedFusedMoEMethod.__init__",
        },
        "fp8": {
            "select": f"{_FUSED}.oracle.fp8:select_fp8_moe_backend",
            "map": f"{_FUSED}.oracle.fp8:map_fp8_backend",
            "kernels": f"{_FUSED}.oracle.fp8:backend_to_kernel_cls",
            "weight_key": f"{_QUTILS}:kFp8StaticTensorSym",
            "activation_key": f"{_QUTILS}:kFp8DynamicTensorSym",
            "kwargs": {"allow_vllm_cutlass": False},
            "cite": "quantization/fp8.py Fp8MoEMethod.__init__ (activation_scheme=dynamic)",
        },
        "fp8_block": {
            "select": f"{_FUSED}.oracle.fp8:select_fp8_moe_backend",
            "map": f"{_FUSED}.oracle.fp8:map_fp8_backend",
            "kernels": f"{_FUSED}.oracle.fp8:backend_to_kernel_cls",
            "weight_key_block": [128, 128],
            "block_resolver": f"{_FUSED}.oracle.fp8:resolve_fp8_moe_weight_block_shape",
            "activation_key": f"{_QUTILS}:kFp8Dynamic128Sym",
            "kwargs": {"allow_vllm_cutlass": False},
            "cite": "quantization/fp8.py Fp8MoEMethod.__init__ (weight_block_size=[128, 128])",
        },
        "nvfp4": {
            "select": f"{_FUSED}.oracle.nvfp4:select_nvfp4_moe_backend",
            "map": f"{_FUSED}.oracle.nvfp4:map_nvfp4_backend",
            "kernels": f"{_FUSED}.oracle.nvfp4:backend_to_kernel_cls",
            "weight_key": f"{_QUTILS}:kNvfp4Static",
            "activation_key": f"{_QUTILS}:kNvfp4Dynamic",
            "cite": "quantization/modelopt.py ModelOptNvFp4FusedMoE.__init__",
        },
        "nvfp4_w4a16": {  # NVFP4 weights, 16-bit activations (ModelOpt W4A16_NVFP4 experts)
            "select": f"{_FUSED}.oracle.nvfp4:select_nvfp4_moe_backend",
            "map": f"{_FUSED}.oracle.nvfp4:map_nvfp4_backend",
            "kernels": f"{_FUSED}.oracle.nvfp4:backend_to_kernel_cls",
            "weight_key": f"{_QUTILS}:kNvfp4Static",
            "kwargs": {"activation_key": None},
            "cite": "quantization/modelopt.py ModelOptNvFp4FusedMoE.__init__ (use_a16: activation_key=None)",
        },
        "mxfp4": {
            "select": f"{_FUSED}.oracle.mxfp4:select_mxfp4_moe_backend",
            "map": f"{_FUSED}.oracle.mxfp4:map_mxfp4_backend",
            "kernels": f"{_FUSED}.oracle.mxfp4:backend_to_kernel_cls",
            "cite": "quantization/mxfp4.py Mxfp4MoEMethod.__init__",
        },
        "int4_w4a16": {
            "select": f"{_FUSED}.oracle.int_wna16:select_wna16_moe_backend",
            "map": f"{_FUSED}.oracle.int_wna16:map_wna16_backend",
            "kernels": f"{_FUSED}.oracle.int_wna16:backend_to_kernel_cls",
            "weight_key_gptq": {
                "scalar_type": "vllm.scalar_type:scalar_types.uint4b8",
                "scale": f"{_QUTILS}:kInt4StaticGroupScale",
                "quant_key": f"{_QUTILS}:QuantKey",
            },
            "quant_config_method": "gptq",
            "kwargs": {"may_have_zp": False, "may_have_bias": True, "allow_tile_padding": True},
            "cite": "quantization/auto_gptq.py AutoGPTQMoEMethod.__init__ (bits=4, sym=True)",
        },
    },
}


#: the first release the oracle's layout was read from (vllm-0.26.0; vllm-0.33.0 shares it). The
#: oracle asks every release from there on through it and detects what a release lacks: the child
#: resolves each path lazily, passes a function only the keyword arguments its signature accepts, and
#: answers "not in this vLLM" for an entry point that is missing, so a new release whose API did not
#: change needs no code.
ORACLE_SINCE: tuple[int, ...] = (0, 26, 0)
ORACLE_LAYOUT: dict[str, Any] = {"attention": _ATTENTION, "moe": _MOE}


@dataclass(frozen=True)
class VllmLayout:
    """Where the releases from ``since`` on keep the things the probes use."""

    since: tuple[int, ...]  # first version this layout applies to
    moe_backend_module: str | None  # module holding `MoEBackend` (None: no --moe-backend)
    attention_enum_modules: tuple[str, ...]  # candidates, first importable wins
    compiled_modules: tuple[str, ...]  # vLLM's own compiled extensions to import
    moe_factory_names: tuple[str, ...]  # in vllm.model_executor.layers.fused_moe
    moe_env_switches: tuple[str, ...] = ()  # env-var era switches (documented in skips)
    notes: tuple[str, ...] = field(default=())


LAYOUTS: tuple[VllmLayout, ...] = (
    VllmLayout(
        since=(0, 0, 0),
        moe_backend_module=None,
        attention_enum_modules=("vllm.attention.backends.registry", "vllm.platforms.interface"),
        compiled_modules=("vllm._C", "vllm._moe_C"),
        moe_factory_names=("FusedMoE",),
        moe_env_switches=(
            "VLLM_USE_FLASHINFER_MOE_FP4",
            "VLLM_USE_FLASHINFER_MOE_FP8",
            "VLLM_FLASHINFER_MOE_BACKEND",
            "VLLM_TEST_FORCE_FP8_MARLIN",
        ),
    ),
    VllmLayout(
        since=(0, 18, 1),
        moe_backend_module="vllm.config.kernel",
        attention_enum_modules=("vllm.v1.attention.backends.registry", "vllm.attention.backends.registry"),
        compiled_modules=("vllm._C", "vllm._moe_C"),
        moe_factory_names=("FusedMoE",),
    ),
    VllmLayout(  # _C became ROCm-only; CUDA ops live in the *_stable_libtorch modules
        since=(0, 24, 0),
        moe_backend_module="vllm.config.kernel",
        attention_enum_modules=("vllm.v1.attention.backends.registry",),
        compiled_modules=("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch"),
        moe_factory_names=("FusedMoE",),
    ),
    VllmLayout(  # FusedMoE(...) factory renamed FusedMoEFactory(...)
        since=(0, 33, 0),
        moe_backend_module="vllm.config.kernel",
        attention_enum_modules=("vllm.v1.attention.backends.registry",),
        compiled_modules=("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch"),
        moe_factory_names=("FusedMoEFactory", "FusedMoE"),
    ),
)


def layout_for(version: str | None) -> VllmLayout:
    """The probes' layout for ``version`` (the oldest one for an unreadable version)."""
    v = parse_version(version) or (0, 0, 0)
    chosen = LAYOUTS[0]
    for layout in LAYOUTS:
        if v >= layout.since:
            chosen = layout
    return chosen


def oracle_layout(version: str | None) -> dict[str, Any] | None:
    """Where ``version``'s selection code lives, for the oracle; None before :data:`ORACLE_SINCE`."""
    v = parse_version(version)
    if v is None or v < ORACLE_SINCE:
        return None
    return {"name": f"vllm-{release_line(version)}", **ORACLE_LAYOUT}


def oracle_skip_reason(version: str | None) -> str | None:
    """None when the oracle can ask ``version``, else why not."""
    if oracle_layout(version) is not None:
        return None
    since = ".".join(str(x) for x in ORACLE_SINCE)
    return (
        f"no oracle adapter for vLLM {version or '(unknown version)'}: the oracle reads vLLM's selection "
        f"code from vLLM {since} on"
    )
