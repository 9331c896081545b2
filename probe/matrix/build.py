"""Build a ``Matrix`` from probe results (``probe run``) and a static scan (``probe scan``).

API used by ``probe run`` (static sections and predicted cells: :mod:`probe.matrix.static_doc`)::

    prov = collect_provenance(image)                 # no torch / vllm import in this process
    matrix = build_matrix(results, provenance=prov, static=scan_dict_or_None)
    write_matrix(matrix, "matrix.json")
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as _md
import importlib.util
import logging
import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from probe import __version__
from probe.cell_params import CellKind, cell_shape
from probe.cells import CellResult
from probe.matrix.io import write_document
from probe.matrix.schema import (
    Cell,
    GpuInfo,
    Matrix,
    Provenance,
    RunInfo,
    StaticSection,
    cc_to_sm,
)
from probe.matrix.static_doc import predicted_cells, static_from_scan
from probe.outcomes import Outcome

log = logging.getLogger(__name__)

# distribution name -> Versions field
_DISTS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "vllm": ("vllm",),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "flashinfer_cubin": ("flashinfer-cubin",),
    "flashinfer_jit_cache": ("flashinfer-jit-cache",),
    "flash_attn": ("flash-attn", "flash_attn", "vllm-flash-attn"),
    "triton": ("triton", "pytorch-triton"),
    "cutlass_dsl": ("nvidia-cutlass-dsl",),
    "humming_kernels": ("humming-kernels",),
    "cuda_runtime": ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12"),
}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _dist_version(names: Iterable[str]) -> str | None:
    for name in names:
        try:
            return _md.version(name)
        except _md.PackageNotFoundError:
            continue
    return None


def _torch_cuda_version() -> str | None:
    """Read ``torch/version.py`` as text (torch is never imported here)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        vfile = Path(loc) / "version.py"
        if vfile.is_file():
            m = re.search(
                r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", vfile.read_text(errors="replace"), re.M
            )
            if m:
                return m.group(1)
    return None


def nvidia_smi(timeout_s: float = 10.0) -> dict[str, Any]:
    """GPU 0 as ``nvidia-smi`` reports it: name, cc, memory_gib, driver, count ({} when it cannot)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    cmd = [exe, "--query-gpu=name,compute_cap,memory.total,driver_version", "--format=csv,noheader,nounits"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi did not answer: %s", exc)
        return {}
    if proc.returncode != 0:
        log.info("nvidia-smi exit %s: %s", proc.returncode, proc.stderr.strip()[:200])
        return {}
    rows = [[c.strip() for c in line.split(",")] for line in proc.stdout.splitlines() if line.strip()]
    if not rows or len(rows[0]) < 4:
        return {}
    name, cc, mem, driver = rows[0][:4]
    out: dict[str, Any] = {"name": name, "count": len(rows), "driver": driver}
    if re.match(r"^\d+\.\d$", cc):
        out["cc"] = cc
    try:
        out["memory_gib"] = round(float(mem) / 1024.0, 1)
    except ValueError:
        pass  # Thor / GB10 report [N/A]: unified memory
    return out


def normalize_gpu(raw: dict[str, Any]) -> GpuInfo:
    """Accept the GPU facts in the shapes the child probes / nvidia-smi give them."""
    from probe.catalog.gpus import catalog

    sm = cc_to_sm(raw.get("cc") or raw.get("compute_capability") or raw.get("capability"))
    if sm is None and isinstance(raw.get("sm"), int):
        sm = raw["sm"]
    mem = raw.get("memory_gib")
    if mem is None and isinstance(raw.get("total_memory"), (int, float)):
        mem = round(raw["total_memory"] / 2**30, 1)
    entry = catalog().by_sm(sm) if sm is not None else None
    integrated = raw.get("integrated", raw.get("is_integrated"))
    return GpuInfo(
        name=raw.get("name"),
        sm=sm,
        cc=f"{sm // 10}.{sm % 10}" if sm is not None else None,
        memory_gib=float(mem) if isinstance(mem, (int, float)) else (entry.memory_gib if entry else None),
        integrated=bool(integrated) if integrated is not None else (entry.integrated if entry else None),
        unified_memory=entry.unified_memory if entry else raw.get("unified_memory"),
        count=raw.get("count"),
    )


def collect_provenance(
    image: str | None = None,
    *,
    dists: Mapping[str, str] | None = None,
    torch_cuda: str | None = None,
    smi: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Facts about this host and image, gathered without importing torch / vllm.

    Versions come from ``importlib.metadata`` (or ``dists``: normalised distribution name -> version of
    the environment the cells ran in, ``probe run --python``, with ``torch_cuda``); the GPU from
    ``nvidia-smi`` (10 s timeout; ``smi``: its answer, already asked) and the GPU catalog. The child
    probes can add better facts later (``build_matrix`` merges an ``import`` cell's
    ``details: {"versions": {...}, "gpu": {...}}``).
    """
    versions: dict[str, Any] = {"python": platform.python_version()}
    for field, names in _DISTS.items():
        if dists is None:
            versions[field] = _dist_version(names)
        else:
            versions[field] = next((dists[n] for n in names if n in dists), None)
    versions["torch_cuda"] = _torch_cuda_version() if dists is None else torch_cuda
    if versions["cuda_runtime"] is None:
        versions["cuda_runtime"] = versions["torch_cuda"]
    smi = dict(smi) if smi is not None else nvidia_smi()
    if smi.get("driver"):
        versions["driver"] = smi.pop("driver")
    gpu = normalize_gpu(smi).model_dump() if smi else None
    return {
        "image": image or os.environ.get("PROBE_IMAGE") or None,
        "image_digest": os.environ.get("PROBE_IMAGE_DIGEST") or os.environ.get("IMAGE_DIGEST") or None,
        "host": socket.gethostname(),
        "created_at": _now(),
        "probe_version": __version__,
        "platform": f"{platform.system()}-{platform.release()} {platform.machine()}",
        "versions": versions,
        "gpu": gpu,
    }


def cell_from_result(result: CellResult, *, vllm_version: str | None = None) -> Cell:
    """A measured matrix cell from one ``CellResult`` (params normalised into typed shape fields)."""
    p = result.params
    shape = cell_shape(result.kind, p)
    dgpu = result.details.get("gpu")
    gpu_sm = cc_to_sm(dgpu.get("cc")) if isinstance(dgpu, dict) else None
    return Cell(
        id=result.id,
        kind=result.kind.value,
        evidence="measured",
        gpu_sm=gpu_sm,
        backend=shape.backend,
        moe_backend=shape.moe_backend,
        attention_backend=shape.attention_backend,
        fa_version=shape.fa_version,
        engine_args=shape.engine_args,
        quant=shape.quant,
        experts=shape.experts,
        top_k=shape.top_k,
        hidden=shape.hidden,
        intermediate=shape.intermediate,
        tp=shape.tp,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        model=shape.model,
        vllm_version=str(result.details.get("vllm_version") or vllm_version or "") or None,
        outcome=result.outcome,
        degraded=result.degraded,
        degraded_reasons=list(result.degraded_reasons),
        phase=result.phase,
        root_cause=result.root_cause,
        hint=result.hint,
        exit_code=result.exit_code,
        signal=result.signal,
        wall_s=result.wall_s,
        peak_rss_mb=result.peak_rss_mb,
        timings=dict(result.timings),
        ref_error=result.ref_error,
        details=dict(result.details),
        log_excerpt=result.log_excerpt,
        params=dict(p),
    )


def _merge_child_facts(prov: dict[str, Any], results: list[CellResult]) -> dict[str, Any]:
    out = dict(prov)
    versions = dict(out.get("versions") or {})
    gpu = out.get("gpu")
    for r in results:
        if r.kind is not CellKind.IMPORT:
            continue
        child_versions = r.details.get("versions")
        if isinstance(child_versions, dict):
            for k, v in child_versions.items():
                key = k.replace("-", "_")
                if v is not None and not versions.get(key):
                    versions[key] = str(v)
        child_gpu = r.details.get("gpu")
        if isinstance(child_gpu, dict) and child_gpu:
            base = dict(gpu or {})
            fresh = normalize_gpu(child_gpu).model_dump()
            base.update({k: v for k, v in fresh.items() if v is not None and base.get(k) is None})
            gpu = base
    out["versions"] = versions
    out["gpu"] = gpu
    return out


def build_matrix(
    results: list[CellResult],
    *,
    provenance: dict[str, Any],
    static: dict[str, Any] | StaticSection | None = None,
    cells_planned: int | None = None,
    infra_error: str | None = None,
    include_predicted: bool = False,
) -> Matrix:
    """Assemble a matrix; raises ``BadInputError`` if the pieces are inconsistent."""
    from pydantic import ValidationError

    from probe.errors import BadInputError

    prov_dict = _merge_child_facts(provenance, list(results))
    prov_dict.setdefault("created_at", _now())
    prov_dict.setdefault("probe_version", __version__)
    try:
        prov = Provenance.model_validate(prov_dict)
        vllm_version = prov.versions.vllm
        cells = [cell_from_result(r, vllm_version=vllm_version) for r in results]
        static_section = static_from_scan(static) if static is not None else None
        if static_section is not None and include_predicted:
            cells.extend(predicted_cells(static_section))
        status: Literal["complete", "partial", "infra_failed"]
        if infra_error:
            status = "infra_failed"
        elif (cells_planned is not None and len(results) < cells_planned) or any(
            r.outcome is Outcome.NOT_RUN
            for r in results  # planned, not measured
        ):
            status = "partial"
        else:
            status = "complete"
        return Matrix(
            provenance=prov,
            static=static_section,
            cells=cells,
            run=RunInfo(status=status, cells_planned=cells_planned, infra_error=infra_error),
        )
    except ValidationError as exc:
        raise BadInputError(f"cannot build a matrix from these results: {exc}") from exc


def write_matrix(matrix: Matrix, path: str | Path) -> Path:
    """Write a matrix atomically as indented JSON; returns the path (a fleet: ``io.write_document``)."""
    return write_document(matrix, path)
