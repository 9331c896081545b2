"""Evidence for the recommender, one loader per source: measured matrix cells (with a matrix's own
static section), static-scan predictions published next to the matrices, and field reports (the
packaged base + ``$PROBE_REPORTS`` files), each applied at the vLLM version of the evidence for its GPU.

The matrices are read as plain JSON with the structural checks of
:mod:`probe.matrix.cell_rules` (the rules ``probe.matrix.schema`` enforces across cells), without
pydantic: ``probe recommend`` must answer in well under 0.2 s as a whole process.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from probe import safejson
from probe.catalog import datafiles
from probe.errors import BadInputError, UsageError
from probe.matrix import cell_rules
from probe.matrix.io import read_gzip_text
from probe.matrix.scan_predictions import is_static_predictions, predicted_cell_dicts
from probe.recommend import evidence_cache
from probe.recommend.images import IMAGE_PACKAGES
from probe.recommend.report_match import kin, kin_cells, report_cells
from probe.recommend.types import EvidenceCell, LoadedEvidence
from probe.reports.base import load_reports
from probe.reports.ranges import version_status
from probe.reports.record import PACKAGED
from probe.userfile import read_text
from probe.versions import version_key

log = logging.getLogger(__name__)

REPORTED_FILE = PACKAGED


def packaged_json(name: str) -> Any:
    """A data file of ``probe/data`` as parsed JSON."""
    return datafiles.read_json(name)


def reported_cells(
    versions_by_sm: Mapping[int, Mapping[str, str | None]] | None = None,
    files: Sequence[str | os.PathLike[str]] | None = None,
    gpus: Iterable[int] | None = None,
) -> list[EvidenceCell]:
    """The field reports as evidence cells (:func:`probe.recommend.report_match.report_cells`, and
    :func:`~probe.recommend.report_match.kin_cells` on the seen GPUs' family siblings), each
    carrying what it ``applies`` to. A report counts on a GPU only where its version range includes
    that GPU's versions in ``versions_by_sm`` (``{120: {"vllm": "0.33.0"}}``; a GPU not named: no
    version known, so open reports count and fixed ones do not). ``files``: extra report files
    (default ``$PROBE_REPORTS``); ``gpus``: only the cells of these GPUs (None: all)."""
    out = []
    only = set(gpus) if gpus is not None else None
    seen_on = None if only is None else only | {k for sm in only for k in kin(sm)}  # siblings' reports too
    for r in load_reports(files, seen_on, check=False):
        for sm in r.gpus:
            if only is not None and sm not in only:
                continue
            status = version_status(r, (versions_by_sm or {}).get(sm, {}))
            if status.applies:
                out += [EvidenceCell(c, r.origin, None) for c in report_cells(r, sm, status)]
        for sm in {k for g in r.gpus for k in kin(g)} - set(r.gpus):
            if only is not None and sm not in only:
                continue
            status = version_status(r, (versions_by_sm or {}).get(sm, {}))
            if status.applies:
                out += [EvidenceCell(c, r.origin, None) for c in kin_cells(r, sm, status)]
    return out


def mark_superseded(cells: list[EvidenceCell]) -> None:
    """Note on each report of a refusal (``unsupported``, seen in vLLM) the models for which vLLM's own
    check at a newer version than any the report saw accepts the same backend on the same GPU
    (``applies.superseded_for``): for those models the refusal is out of date."""
    refusals = [
        c.cell
        for c in cells
        if c.cell.get("outcome") == "unsupported"
        and (a := c.cell.get("applies"))
        and a.get("seen_in") == "vllm"
        and a.get("vllm_seen")
    ]
    if not refusals:
        return
    wanted = {(d.get("gpu_sm"), d.get("kind"), d.get("backend")) for d in refusals}
    accepted: dict[tuple[Any, ...], list[tuple[Any, str]]] = {}
    for c in cells:
        d = c.cell
        key = (d.get("gpu_sm"), d.get("kind"), d.get("backend"))
        if key in wanted and d.get("basis") == "vllm_check" and d.get("outcome") == "ok" and c.vllm:
            accepted.setdefault(key, []).append((version_key(c.vllm), str(d.get("model"))))
    for d in refusals:
        seen = version_key(d["applies"]["vllm_seen"])
        found = accepted.get((d.get("gpu_sm"), d.get("kind"), d.get("backend")), [])
        d["applies"]["superseded_for"] = sorted(
            {m for v, m in found if v is not None and seen is not None and v > seen}
        )


def _asked_gpus(cells: list[EvidenceCell], only_sm: int | None) -> set[int] | None:
    """The GPUs an answer can be about: the one asked, else the ones measured (None: any)."""
    if only_sm is not None:
        return {only_sm}
    measured = {
        c.get("gpu_sm") for c in cells if c.evidence == "measured" and isinstance(c.get("gpu_sm"), int)
    }
    return measured or None


def evidence_versions(
    cells: Iterable[EvidenceCell], gpus: set[int] | None = None
) -> dict[int, dict[str, str | None]]:
    """Per GPU (of ``gpus``; None: all), the vLLM version its evidence speaks of: measured cells'
    first, else predicted ones' (the version the answer's flags are spelled for)."""
    best: dict[int, tuple[int, str]] = {}
    for c in cells:
        sm = c.cell.get("gpu_sm")
        if not c.vllm or not isinstance(sm, int) or (gpus is not None and sm not in gpus):
            continue
        rank = {"measured": 2, "predicted": 1}.get(c.cell["evidence"], 0)
        if rank > best.get(sm, (0, ""))[0]:
            best[sm] = (rank, c.vllm)
    return {sm: {"vllm": v} for sm, (_, v) in best.items()}


def default_matrix_paths() -> list[Path]:
    """``$PROBE_MATRICES`` (os.pathsep-separated), else the published matrices shipped with the package."""
    env = os.environ.get("PROBE_MATRICES")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    shipped = datafiles.published_matrices()
    return [shipped] if shipped is not None else []


_PER_GPU = re.compile(r"^sm_(\d+)\.json(?:\.gz)?$")


def per_gpu_sm(path: Path) -> int | None:
    """The GPU of a per-GPU predictions file (``matrices/predicted/vllm-0.33.0/sm_120.json``), else None."""
    m = _PER_GPU.match(path.name)
    return int(m.group(1)) if m else None


def predictions_version(path: Path) -> str | None:
    """The vLLM version of a per-GPU predictions file's folder (``…/vllm-0.33.0/sm_90.json``), else None."""
    parent = path.parent.name
    return parent[len("vllm-") :] if parent.startswith("vllm-") else None


def _wanted(path: Path, sm: int | None, predictions: str | None) -> bool:
    """A per-GPU predictions file is read only for the asked GPU, and (in a ``vllm-<version>/``
    folder) only for the answer's predictions version."""
    gpu = per_gpu_sm(path)
    if gpu is None:
        return True
    folder = predictions_version(path)
    return gpu == sm and (folder is None or folder == predictions)


def json_files(paths: Iterable[Path], sm: int | None = None, predictions: str | None = None) -> list[Path]:
    """The files named, and the ``*.json`` files under the folders named. Per-GPU prediction files
    found in a folder (``sm_<N>.json[.gz]``; no other ``.gz``: a run's plan or journal) are kept
    only when ``sm`` is ``N`` and, in a ``vllm-<version>/`` folder, only when ``predictions`` is
    that version."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = [Path(folder, n) for folder, _, names in os.walk(p) for n in names]
            found = [x for x in found if x.suffix == ".json" or _PER_GPU.match(x.name)]
            files.extend(sorted(x for x in found if _wanted(x, sm, predictions) and x.is_file()))
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


# Fields of a measured cell no answer reads (the log text behind the root-cause line, the hint to
# the user of a matrix): left out of the evidence, so that a 3 MB matrix costs half as much to keep.
UNREAD_FIELDS = frozenset({"log_excerpt", "hint"})


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
    versions = prov.get("versions") if isinstance(prov.get("versions"), dict) else None
    image = {k: versions.get(k) for k in IMAGE_PACKAGES} if versions else None
    out = []
    for c in cells:
        c = {k: v for k, v in c.items() if k not in UNREAD_FIELDS}
        ev = c["evidence"] = c.get("evidence", "measured")
        if ev == "measured":
            if cell_rules.measured_sm_conflict(c, sm):
                raise BadInputError(
                    f"{path}: measured cell {c['id']!r} is for sm_{c['gpu_sm']} but the "
                    f"provenance GPU is sm_{sm}"
                )
            c["gpu_sm"] = sm
        cell_vllm = c.get("vllm_version") or (vllm if ev == "measured" else None) or static_vllm or vllm
        measured = ev == "measured"
        out.append(
            EvidenceCell(
                c, str(path), cell_vllm, gpu_name, count if measured else None, image if measured else None
            )
        )
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
        text = read_gzip_text(f) if f.name.endswith(".gz") else read_text(f, what="matrix")
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


def file_evidence(f: Path, only_sm: int | None = None) -> tuple[list[EvidenceCell], bool]:
    """The cells of one matrix / fleet / static-prediction file (see :func:`load_evidence`), and
    whether the file counts as used (a JSON file that is not a matrix does not)."""
    doc = _read_document(f, only_sm)
    if doc is None:
        return [], True
    if is_static_predictions(doc):
        return scan_document_cells(doc, f), True
    if "schema_version" not in doc:
        log.debug("%s: not a matrix, skipped", f)
        return [], False
    cells: list[EvidenceCell] = []
    for m in _matrix_documents(doc, f):
        cells.extend(matrix_cells(m, f, only_sm))
    return cells, True


def load_evidence(
    paths: Iterable[Path],
    only_sm: int | None = None,
    *,
    predictions: str | None = None,
    gpu_files_only: bool = False,
    reports: bool = True,
) -> LoadedEvidence:
    """All cells of all matrix / fleet / static-prediction files under ``paths`` plus the field
    reports (packaged + ``$PROBE_REPORTS``; at the vLLM version of each GPU's evidence). With
    ``only_sm``, matrices measured on another GPU (and holding no static
    section) are skipped, and of the per-GPU prediction files only ``sm_<only_sm>.json`` is read
    (without ``only_sm``, none) — of the ``vllm-<predictions>/`` folder. ``gpu_files_only``: only
    those per-GPU files (the second read, once the GPU and the answer's vLLM version are known).
    Each file's cells come through :mod:`probe.recommend.evidence_cache`."""
    cells: list[EvidenceCell] = []
    used: list[str] = []
    files = json_files(paths, only_sm, predictions)
    for f in files if not gpu_files_only else [f for f in files if per_gpu_sm(f) is not None]:
        file_cells, counts = evidence_cache.cached(f, only_sm, file_evidence)
        cells.extend(file_cells)
        if counts:
            used.append(str(f))
    if reports:
        gpus = _asked_gpus(cells, only_sm)
        cells.extend(reported_cells(evidence_versions(cells, gpus), gpus=gpus))
        mark_superseded(cells)
    return LoadedEvidence(cells, used)
