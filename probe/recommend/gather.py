"""Gathering the evidence for one question: the GPU, the one vLLM version, and the cells about both.

Two reads: first the matrices that are not per-GPU prediction files (measured matrices, static
scans) — they tell the GPU when none was asked and the vLLM of its measured matrix —, then the
per-GPU prediction file of that GPU from the answer's predictions version
(:mod:`.answer_version`). A static scan of another vLLM release than the answer's is left out: it
describes another image.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probe.catalog.gpus import parse_target
from probe.catalog.models import find
from probe.catalog.profile import ModelProfile
from probe.errors import OptionError
from probe.outcomes import unknown
from probe.recommend import answer_version
from probe.recommend.answer_version import AnswerVersion
from probe.recommend.sources import load_evidence, mark_superseded, reported_cells
from probe.recommend.types import EvidenceCell, LoadedEvidence, Request
from probe.versions import release_line


@dataclass(frozen=True)
class AskedCells:
    """vLLM's verdicts asked just now (``--ask-vllm``): matrix cells and the vLLM that gave them."""

    cells: list[dict[str, Any]]
    vllm: str | None
    source: str


@dataclass(frozen=True)
class Gathered:
    loaded: LoadedEvidence
    sm: int
    gpu_name: str
    version: AnswerVersion
    scan: answer_version.ScanFacts | None = None


def local_gpu() -> tuple[int, str] | None:
    """(sm, name) of this machine's first GPU, when the CUDA driver shows one (no torch)."""
    from probe.arch.localgpu import local_gpus

    found = local_gpus()
    return (found[0].sm, found[0].name) if found else None


def target_gpu(gpu: str | None, cells: list[EvidenceCell], paths: list[Path]) -> tuple[int, str]:
    """(sm, name) of the GPU asked for, else of this machine's GPU, else of the one GPU the matrices
    were measured on."""
    if gpu is not None:
        target = parse_target(gpu, known_only=True)
        return target.sm, target.names[0]
    here = local_gpu()
    if here is not None:
        return here
    measured = sorted({c.get("gpu_sm") for c in cells if c.evidence == "measured" and c.get("gpu_sm")})
    if len(measured) == 1:
        sm = measured[0]
        names = sorted({c.gpu_name for c in cells if c.get("gpu_sm") == sm and c.gpu_name})
        return sm, " / ".join(names) or parse_target(str(sm)).names[0]
    if measured:
        raise OptionError(
            "gpu",
            "the matrices hold measurements for several GPUs: " + ", ".join(f"sm_{s}" for s in measured),
            hint="pick one of them",
        )
    raise OptionError(
        "gpu",
        "no measured matrix found; say which GPU to predict for (e.g. sm_110a)",
        hint=f"matrices searched: {', '.join(str(p) for p in paths) or '(none)'}",
    )


def measured_vllm(cells: list[EvidenceCell], sm: int) -> str | None:
    """The vLLM version most of this GPU's measured cells ran with."""
    seen = Counter(c.vllm for c in cells if c.evidence == "measured" and c.get("gpu_sm") == sm and c.vllm)
    return seen.most_common(1)[0][0] if seen else None


def same_image_scan(c: EvidenceCell, version: AnswerVersion) -> bool:
    """A static-scan cell describes the answer's image only when it scanned the answer's vLLM release."""
    if not (c.evidence == "predicted" and c.get("basis") == "elf_scan"):
        return True
    return version.vllm is None or c.vllm is None or release_line(c.vllm) == release_line(version.vllm)


def gather(
    paths: list[Path],
    gpu: str | None,
    *,
    vllm: str | None = None,
    scan: answer_version.ScanFacts | None = None,
    loaded: LoadedEvidence | None = None,
    asked: AskedCells | None = None,
    report_files: list[str] | None = None,
) -> Gathered:
    """The evidence, the GPU and the answer's vLLM version (see the module docstring). ``loaded``:
    evidence already read (``probe diff`` passes one matrix's cells, its reports included); else the
    field reports (packaged, ``report_files``, ``$PROBE_REPORTS``) apply at the answer's version."""
    published = answer_version.published_predictions(paths) if loaded is None else {}
    asked_sm = parse_target(gpu, known_only=True).sm if gpu is not None else None
    first = loaded if loaded is not None else load_evidence(paths, asked_sm, reports=False)
    sm, name = target_gpu(gpu, first.cells, paths)
    facts = scan
    asked_vllm = asked.vllm if asked is not None else None
    version = answer_version.choose(vllm, facts, measured_vllm(first.cells, sm), published, asked_vllm)
    cells, files = list(first.cells), list(first.files)
    if loaded is None and version.predictions is not None:
        more = load_evidence(paths, sm, predictions=version.predictions, gpu_files_only=True, reports=False)
        read = set(files)
        cells += [c for c in more.cells if c.source not in read]
        files += [f for f in more.files if f not in read]
    if asked is not None:  # vLLM asked now about this model: its own checks, this version's
        cells = [c for c in cells if c.get("basis") != "vllm_check"]
        cells += [EvidenceCell(c, asked.source, asked.vllm) for c in asked.cells]
    if loaded is None:
        at = {sm: {"vllm": version.vllm}} if version.vllm else {}
        cells += reported_cells(at, report_files or None, gpus=[sm])
        mark_superseded(cells)
    if facts is not None and facts.document is not None:  # the image's own scan, not the published one
        from probe.recommend.sources import scan_document_cells

        cells = [c for c in cells if c.get("basis") != "elf_scan"]
        cells += [c for c in scan_document_cells(facts.document, Path("image scan")) if c.get("gpu_sm") == sm]
    kept = [c for c in cells if same_image_scan(c, version)]
    return Gathered(LoadedEvidence(kept, files), sm, name, version, facts)


def about(cells: list[EvidenceCell], req: Request) -> list[EvidenceCell]:
    """The cells about the asked GPU; of vLLM's own checks, only those about this model. Cells whose
    result is unknown (``not_run``, or stopped while JIT-compiling) are no evidence either way."""
    out = []
    for c in cells:
        d = c.cell
        if d.get("gpu_sm") != req.sm or unknown(d.get("outcome"), d.get("root_cause")):
            continue
        if d.get("basis") == "vllm_check" and not req.is_model(d.get("model")):
            continue
        out.append(c)
    return out


def family_runs(cells: list[EvidenceCell], profile: ModelProfile) -> list[EvidenceCell]:
    """Measured engine runs (any GPU read) of models of the same family (model type) as ``profile``."""
    family = profile.text_model_type or profile.model_type
    out = []
    for c in cells:
        if c.kind != "engine" or c.evidence != "measured" or not c.get("model"):
            continue
        hit = find(str(c.get("model")))
        if hit is not None and (hit[0].text_model_type or hit[0].model_type) == family:
            out.append(c)
    return out
