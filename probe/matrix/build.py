"""Build a ``Matrix`` from probe results (``probe run``) and a static scan (``probe scan``).

API used by ``probe run``::

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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from probe import __version__
from probe.cells import CellResult
from probe.matrix._static import iter_verdict_rows, predicted_cell_dicts
from probe.matrix.schema import (
    Cell,
    GpuInfo,
    Matrix,
    Provenance,
    RunInfo,
    StaticFile,
    StaticKernel,
    StaticSection,
    StaticVerdict,
    cc_to_sm,
)

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


def _nvidia_smi(timeout_s: float = 10.0) -> dict[str, Any]:
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


def collect_provenance(image: str | None = None) -> dict[str, Any]:
    """Facts about this host and image, gathered without importing torch / vllm.

    Versions come from ``importlib.metadata``; the GPU from ``nvidia-smi`` (10 s timeout) and the
    GPU catalog. The child probes can add better facts later (``build_matrix`` merges an
    ``import`` cell's ``details: {"versions": {...}, "gpu": {...}}``).
    """
    versions: dict[str, Any] = {"python": platform.python_version()}
    for field, names in _DISTS.items():
        versions[field] = _dist_version(names)
    versions["torch_cuda"] = _torch_cuda_version()
    if versions["cuda_runtime"] is None:
        versions["cuda_runtime"] = versions["torch_cuda"]
    smi = _nvidia_smi()
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


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def cell_from_result(result: CellResult, *, vllm_version: str | None = None) -> Cell:
    """A measured matrix cell from one ``CellResult`` (params normalised into typed shape fields)."""
    p = result.params
    kind = result.kind
    backend = p.get("backend")
    moe_backend = p.get("moe_backend") if kind == "engine" else (backend if kind == "moe" else None)
    attn_backend = (
        p.get("attention_backend") if kind == "engine" else (backend if kind == "attention" else None)
    )
    if kind == "engine" and not backend:
        backend = "+".join(str(x) for x in (moe_backend, attn_backend) if x) or None
    dgpu = result.details.get("gpu")
    gpu_sm = cc_to_sm(dgpu.get("cc")) if isinstance(dgpu, dict) else None
    return Cell(
        id=result.id,
        kind=kind,
        evidence="measured",
        gpu_sm=gpu_sm,
        backend=str(backend) if backend is not None else None,
        moe_backend=str(moe_backend) if moe_backend is not None else None,
        attention_backend=str(attn_backend) if attn_backend is not None else None,
        fa_version=_int(p.get("fa_version")),
        engine_args={str(k): str(v) for k, v in (p.get("engine_args") or {}).items()},
        quant=p.get("quant"),
        experts=_int(p.get("experts")),
        top_k=_int(p.get("top_k")),
        hidden=_int(p.get("hidden")),
        intermediate=_int(p.get("intermediate")),
        tp=_int(p.get("tp")),
        num_heads=_int(p.get("num_heads")),
        num_kv_heads=_int(p.get("num_kv_heads")),
        head_dim=_int(p.get("head_dim")),
        model=p.get("model"),
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


def _labels(values: Any) -> list[str]:
    if isinstance(values, str):
        return [values]
    if isinstance(values, dict):  # {"sass": [...], "ptx": [...]}
        out: list[str] = []
        for v in values.values():
            out.extend(_labels(v))
        return out
    if isinstance(values, (list, tuple)):
        out = []
        for v in values:
            if isinstance(v, str):
                out.append(v)
            elif isinstance(v, dict) and (lab := v.get("label") or v.get("arch") or v.get("target")):
                out.append(str(lab))
        return out
    return []


def _file_arches(entry: dict[str, Any]) -> list[str]:
    if isinstance(entry.get("entries"), list):  # a `probe scan` FileRecord
        return sorted(
            {
                str(e["arch"])
                for e in entry["entries"]
                if isinstance(e, dict) and e.get("arch") and e.get("kind") in ("sass", "ptx")
            }
        )
    for key in ("arches", "targets", "codes"):
        if key in entry:
            return sorted(set(_labels(entry[key])))
    return sorted(set(_labels(entry.get("sass", [])) + _labels(entry.get("ptx", []))))


def static_from_scan(data: dict[str, Any] | StaticSection) -> StaticSection:
    """Reduce a ``probe scan`` JSON document (or an already-reduced section) to the static section.

    Accepted input shapes: ``files`` as a list of ``{path|file, package?, arches|targets|sass+ptx,
    kernels?: [{name, arches|targets}]}``; ``backends``/``verdicts`` either as ``{backend: {target:
    {verdict, reason, via?, files?}}}`` or a list of ``{backend, target, verdict, reason}``.
    """
    if isinstance(data, StaticSection):
        return data
    if isinstance(data.get("scan"), dict):  # {"scan": ScanReport, "backends": backend view, ...}
        merged = dict(data["scan"])
        merged.update({k: v for k, v in data.items() if k != "scan"})
        data = merged
    files: list[StaticFile] = []
    for entry in data.get("files", []) or []:
        if not isinstance(entry, dict):
            continue
        path = entry.get("path") or entry.get("file") or entry.get("name")
        if not path:
            continue
        kernels = []
        raw_kernels = entry.get("kernels")
        for k in raw_kernels if isinstance(raw_kernels, list) else []:
            if isinstance(k, dict) and k.get("name"):
                kernels.append(StaticKernel(name=str(k["name"]), arches=sorted(set(_file_arches(k)))))
        files.append(
            StaticFile(
                path=str(path),
                package=entry.get("package") or entry.get("distribution"),
                arches=_file_arches(entry),
                kernels=kernels,
                error=entry.get("error"),
            )
        )
    table: dict[str, dict[str, StaticVerdict]] = {}
    rows = list(iter_verdict_rows(data))
    for backend, target, v in rows:
        table.setdefault(backend, {})[target] = StaticVerdict(
            verdict=v["verdict"],
            reason=str(v.get("reason") or v["verdict"]),
            via=v.get("via"),
            files=[str(f) for f in v.get("files", []) or []],
        )
    targets = [t.get("target") if isinstance(t, dict) else t for t in data.get("targets") or []] or sorted(
        {t for per in table.values() for t in per}
    )
    packages = data.get("packages") or data.get("backend_catalog_reference") or {}
    if isinstance(packages, list):
        packages = {str(x.get("name")): str(x.get("version")) for x in packages if isinstance(x, dict)}
    if not packages and isinstance(data.get("provenance"), list):  # static predictions: the scanned wheels
        packages = {
            str(w.get("package")): str(w.get("wheel")) for w in data["provenance"] if isinstance(w, dict)
        }
    source = data.get("source") or data.get("name")
    return StaticSection(
        source=str(source) if source else None,
        packages={str(k): str(v) for k, v in packages.items()},
        targets=[str(t) for t in targets],
        files=files,
        backends=table,
    )


def predicted_cells(static: StaticSection) -> list[Cell]:
    """One ``predicted`` cell per backend and target of the static verdict table."""
    return [Cell.model_validate(c) for c in predicted_cell_dicts(static.model_dump())]


def static_predictions_matrix(doc: dict[str, Any]) -> Matrix:
    """A published static-predictions file (``matrices/static/``) as a matrix of ``predicted`` cells.

    No GPU ran anything: ``provenance.gpu`` is empty and every cell carries its own ``gpu_sm``.
    """
    gen = doc.get("generated_by") if isinstance(doc.get("generated_by"), dict) else {}
    static = static_from_scan(doc)
    prov = Provenance(
        created_at=str(doc.get("created_at") or "unknown"),
        probe_version=str(gen.get("probe_version") or __version__),
        label=str(doc.get("name") or "static predictions"),
        note=(str(doc.get("what")) if doc.get("what") else None),
    )
    return Matrix(provenance=prov, static=static, cells=predicted_cells(static))


def _merge_child_facts(prov: dict[str, Any], results: list[CellResult]) -> dict[str, Any]:
    out = dict(prov)
    versions = dict(out.get("versions") or {})
    gpu = out.get("gpu")
    for r in results:
        if r.kind != "import":
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
        if infra_error:
            status = "infra_failed"
        elif cells_planned is not None and len(results) < cells_planned:
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
    """Write a matrix (or fleet) atomically as indented JSON; returns the path."""
    from probe.matrix.io import dump_document, write_text_atomic

    write_text_atomic(path, dump_document(matrix))
    return Path(path)
