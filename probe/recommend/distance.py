"""How far an answer's evidence is from its question, said when nothing was measured on the GPU asked.

Without a run on the GPU, an answer rests on vLLM's own checks, the ELF scan and field reports. Its
note names what is nearest and how near: the closest GPU with published measurements (a sibling of
the same ``f`` family, the same major, or another architecture) and the vLLM it ran; the vLLM whose
checks were asked when the answer's own was not published; and how many field reports reach this
request from this GPU itself, how many only from a family sibling, and how many of those are of this
model. The published measured matrices are found by their file names
(``nvidia-h200-sm90-vllm-0.26.0….json``): nothing is read but a folder listing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from probe.catalog.gpus import catalog
from probe.recommend import report_match
from probe.recommend.types import EvidenceCell, Request

_MEASURED_NAME = re.compile(r"-sm(\d+)-vllm-(\d[\w.]*?)(?:\.[a-z][\w-]*)*\.json$")


def measured_gpus() -> dict[int, set[str]]:
    """Compute capability -> the vLLM versions of the measured matrices published with probe."""
    from probe.catalog.datafiles import published_matrices

    root = published_matrices()
    out: dict[int, set[str]] = {}
    for path in sorted((root / "measured").glob("*.json")) if root is not None else ():
        m = _MEASURED_NAME.search(path.name)
        if m:
            out.setdefault(int(m.group(1)), set()).add(m.group(2))
    return out


def _nearness(sm: int, other: int) -> tuple[int, str]:
    """(rank, words) of how near GPU ``other`` is to ``sm``: a family sibling, the same major, or not."""
    if other in report_match.kin(sm):
        return 0, "its family sibling: the same kernels"
    if other // 10 == sm // 10:
        return 1, "the same major, other kernels"
    return 2, "another architecture"


def nearest_measured(sm: int, measured: dict[int, set[str]]) -> str | None:
    """'sm_90 (H200; another architecture), vLLM 0.26.0' — the nearest GPU with measurements."""
    if not measured:
        return None
    other = min(measured, key=lambda g: (_nearness(sm, g)[0], abs(g - sm)))
    gpu = catalog().by_sm(other)
    name = f"{gpu.names[0]}; " if gpu is not None else ""
    versions = ", ".join(sorted(measured[other]))
    return f"sm_{other} ({name}{_nearness(sm, other)[1]}), vLLM {versions}"


def report_reach(cells: Iterable[EvidenceCell], req: Request) -> str | None:
    """'field reports: 3 on sm_121 itself (1 of this model), 5 only from its family siblings'."""
    here = sibling = this_model = 0
    for c in cells:
        if c.evidence != "reported" or not c.get("applies") or not report_match.applies(c, req):
            continue
        if c.get("applies", {}).get("kin_of"):
            sibling += 1
        else:
            here += 1
            this_model += bool(c.get("model") and report_match.is_model(req, c.get("model")))
    if not here and not sibling:
        return "no field report reaches this GPU, backend and set-up"
    words = [f"{here} on sm_{req.sm} itself" + (f" ({this_model} of this model)" if this_model else "")]
    if sibling:
        words.append(f"{sibling} only from its family siblings")
    return "field reports: " + ", ".join(words)


def fallback_note(sm: int, mine: list[EvidenceCell], req: Request, checks: str | None) -> str:
    """The note of an answer with nothing measured on the GPU: where it comes from and how far that is."""
    far = [f"nearest measured: {n}" for n in [nearest_measured(sm, measured_gpus())] if n]
    if checks and req.vllm and checks != req.vllm:
        far.append(f"vLLM's own checks are those of {checks}, the nearest published to {req.vllm}")
    far += [r for r in [report_reach(mine, req)] if r]
    return (
        f"No measured matrix for sm_{sm}: this answer comes from vLLM's own selection checks, static "
        "predictions and field reports, not from a run on this GPU"
        + (f" (how far that is — {'; '.join(far)})" if far else "")
        + ". Run `probe run` on the GPU for measured evidence."
    )
