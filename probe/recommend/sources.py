"""Evidence for the recommender, one loader per source: measured matrix cells (with a matrix's own
static section), static-scan predictions published next to the matrices, and packaged field reports.

The matrices are read as plain JSON with the structural checks of
:mod:`probe.matrix.cell_rules` (the rules ``probe.matrix.schema`` enforces across cells), without
pydantic: ``probe recommend`` must answer in well under 0.2 s as a whole process.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from probe import safejson
from probe.catalog import datafiles
from probe.errors import BadInputError, UsageError
from probe.matrix import cell_rules
from probe.matrix.scan_predictions import is_static_predictions, predicted_cell_dicts
from probe.recommend.types import EvidenceCell, LoadedEvidence

log = logging.getLogger(__name__)

REPORTED_FILE = "probe/data/reported.json"


def packaged_json(name: str) -> Any:
    """A data file of ``probe/data`` as parsed JSON."""
    return datafiles.read_json(name)


def reported_cells() -> list[EvidenceCell]:
    """The packaged field reports (``probe/data/reported.json``; validated by the test suite), each
    cell carrying what it ``applies`` to (:mod:`probe.recommend.reports`)."""
    doc = packaged_json("reported.json")
    return [
        EvidenceCell({**r["cell"], "applies": r["applies"]}, REPORTED_FILE, r["cell"].get("vllm_version"))
        for r in doc.get("reports", [])
    ]


def default_matrix_paths() -> list[Path]:
    """``$PROBE_MATRICES`` (os.pathsep-separated), else the published matrices shipped with the package."""
    env = os.environ.get("PROBE_MATRICES")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    shipped = datafiles.published_matrices()
    return [shipped] if shipped is not None else []


_PER_GPU = re.compile(r"^sm_(\d+)\.json$")


def per_gpu_sm(path: Path) -> int | None:
    """The GPU of a per-GPU predictions file (``matrices/predicted/vllm-0.33.0/sm_120.json``), else None."""
    m = _PER_GPU.match(path.name)
    return int(m.group(1)) if m else None


def json_files(paths: Iterable[Path], sm: int | None = None) -> list[Path]:
    """The files named, and the ``*.json`` files under the folders named. Per-GPU prediction files
    found in a folder (``sm_<N>.json``) are kept only when ``sm`` is ``N``."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(sorted(x for x in p.rglob("*.json") if per_gpu_sm(x) in (None, sm) and x.is_file()))
        elif p.is_file():
            files.append(p)
        else:
            raise UsageError(f"{p}: no such matrix file or folder")
    return files


def _checked_cells(cells: Any, path: Path) -> list[dict[str, Any]]:
    try:
        return cell_rules.check_cell_dicts(cells)
    except ValueError as exc:
        raise BadInputError(f"{path}: {exc}") from exc


def matrix_cells(doc: dict[str, Any], path: Path, only_sm: int | None = None) -> list[EvidenceCell]:
    """The cells of one matrix document: its measured cells plus, when it holds a static section
    and no predicted cells, one predicted cell per backend x target of that section.

    With ``only_sm``, a matrix measured on another GPU and holding no static section gives nothing.
    """
    prov = doc.get("provenance") or {}
    if not isinstance(prov, dict):
        raise BadInputError(f"{path}: 'provenance' must be an object")
    gpu = prov.get("gpu") or {}
    sm = gpu.get("sm") if isinstance(gpu, dict) else None
    if only_sm is not None and sm is not None and sm != only_sm and not doc.get("static"):
        return []  # measured on another GPU and no static section: nothing here concerns the asked GPU
    vllm = (prov.get("versions") or {}).get("vllm")
    static = doc.get("static") or {}
    static_vllm = (static.get("packages") or {}).get("vllm") if isinstance(static, dict) else None
    cells = _checked_cells(doc.get("cells", []), path)
    if isinstance(static, dict) and static and not any(c.get("evidence") == "predicted" for c in cells):
        cells = cells + predicted_cell_dicts(static)
    gpu_name = gpu.get("name") if isinstance(gpu, dict) else None
    count = gpu.get("count") if isinstance(gpu, dict) else None
    out = []
    for c in cells:
        c = dict(c)
        ev = c["evidence"] = c.get("evidence", "measured")
        if ev == "measured":
            if cell_rules.measured_sm_conflict(c, sm):
                raise BadInputError(
                    f"{path}: measured cell {c['id']!r} is for sm_{c['gpu_sm']} but the "
                    f"provenance GPU is sm_{sm}"
                )
            c["gpu_sm"] = sm
        cell_vllm = c.get("vllm_version") or (vllm if ev == "measured" else None) or static_vllm or vllm
        out.append(EvidenceCell(c, str(path), cell_vllm, gpu_name, count if ev == "measured" else None))
    return out


def scan_document_cells(doc: dict[str, Any], path: Path) -> list[EvidenceCell]:
    """Predicted cells (basis ``elf_scan``) of a raw ``probe scan`` / static-predictions table published
    next to the matrices, one per backend, quant variant (``cutlass [fp8]``) and target."""
    pk = doc.get("packages") or doc.get("backend_catalog_reference") or {}
    vm = re.match(r"^\s*(\d+\.\d+\.\d+)", str(pk.get("vllm") or "")) if isinstance(pk, dict) else None
    cells = predicted_cell_dicts(doc, variants=True)
    return [EvidenceCell({**c, "basis": "elf_scan"}, str(path), vm.group(1) if vm else None) for c in cells]


def _other_gpu_head(text: str, only_sm: int | None) -> bool:
    """A measured matrix of another GPU without a static section, told from the part of the file
    before its ``"cells"`` (``write_matrix`` puts provenance, run and static first): such a file is
    not parsed further. Anything unexpected (a fleet, a key order it cannot read) says False."""
    if only_sm is None:
        return False
    i = text.find('"cells":')
    if i < 0 or i > 200_000:
        return False
    try:
        head = safejson.loads(text[:i].rstrip().rstrip(",") + "}")
    except ValueError:
        return False
    gpu = (head.get("provenance") or {}).get("gpu") if isinstance(head, dict) else None
    return (
        head.get("kind", "matrix") == "matrix"
        and not head.get("static")
        and isinstance(gpu, dict)
        and gpu.get("sm") not in (None, only_sm)
    )


def _read_document(f: Path, only_sm: int | None = None) -> dict[str, Any] | None:
    """The parsed file; None for a measured matrix of another GPU than ``only_sm`` (nothing in it
    concerns the asked GPU)."""
    try:
        text = f.read_text(encoding="utf-8")
        if _other_gpu_head(text, only_sm):
            return None
        doc = safejson.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, JsonLimitError
        raise BadInputError(f"{f}: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise BadInputError(f"{f}: a matrix file holds a JSON object")
    return doc


def _matrix_documents(doc: dict[str, Any], f: Path) -> list[Any]:
    """The member matrices of a matrix / fleet document (schema version and kind checked)."""
    if doc.get("schema_version") != 1:
        raise BadInputError(
            f"{f}: schema_version {doc.get('schema_version')!r} is not supported (expected 1)"
        )
    kind = doc.get("kind", "matrix")
    members = doc.get("matrices", []) if kind == "fleet" else [doc]
    if kind not in ("matrix", "fleet") or not isinstance(members, list):
        raise BadInputError(f"{f}: unknown document kind {kind!r}")
    return members


def load_evidence(
    paths: Iterable[Path], only_sm: int | None = None, *, gpu_files_only: bool = False, reports: bool = True
) -> LoadedEvidence:
    """All cells of all matrix / fleet / static-prediction files under ``paths`` plus the packaged
    field reports. With ``only_sm``, matrices measured on another GPU (and holding no static
    section) are skipped, and of the per-GPU prediction files only ``sm_<only_sm>.json`` is read
    (without ``only_sm``, none). ``gpu_files_only``: only those per-GPU files (the second read,
    once the GPU of the measured matrix is known)."""
    cells: list[EvidenceCell] = []
    used: list[str] = []
    files = json_files(paths, only_sm)
    for f in files if not gpu_files_only else [f for f in files if per_gpu_sm(f) is not None]:
        doc = _read_document(f, only_sm)
        if doc is None:
            used.append(str(f))
            continue
        if is_static_predictions(doc):
            cells.extend(scan_document_cells(doc, f))
        elif "schema_version" not in doc:
            log.debug("%s: not a matrix, skipped", f)
            continue
        else:
            for m in _matrix_documents(doc, f):
                cells.extend(matrix_cells(m, f, only_sm))
        used.append(str(f))
    if reports:
        cells.extend(reported_cells())
    return LoadedEvidence(cells, used)
