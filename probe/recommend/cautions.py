"""What the answer warns about: missing evidence, failed engine runs, and static predictions or
field reports that speak against the chosen pair."""

from __future__ import annotations

from pathlib import Path

from probe.recommend import report_match
from probe.recommend.select import Relevant
from probe.recommend.types import EvidenceCell, Pair, Request
from probe.recommend.verdict import scan_cell


def no_moe_shape(rel: Relevant, req: Request) -> list[str]:
    """A measured matrix without a MoE cell at the model's shape."""
    if not req.experts or any(c.evidence == "measured" for c in rel.moe):
        return []
    p = req.profile
    return [
        f"the measured matrix has no MoE cell at {p.name}'s shape "
        f"(E={req.experts}, H={req.moe_hidden}, I={req.intermediate}/TP, {req.quant})"
    ]


def every_engine_run_failed(rel: Relevant, req: Request) -> list[str]:
    measured = [c for c in rel.engine if c.evidence == "measured"]
    if not measured or any(c.ok for c in measured):
        return []
    causes = sorted({f"{c.get('outcome')}: {(c.get('root_cause') or '?')[:160]}" for c in measured})
    return [
        f"every engine run of {req.name} on sm_{req.sm} failed ({len(measured)} runs): "
        + " | ".join(causes[:3])
        + " — the kernel-level choice below has not been seen to start this model end to end"
    ]


def nothing_works(rel: Relevant, req: Request) -> str:
    if not rel.all:
        return f"no evidence at all for {req.name} on sm_{req.sm}"
    what = "MoE x attention pair" if req.experts else "attention backend"
    return f"no working {what} found for {req.name} ({req.quant}) on sm_{req.sm}"


def _fa_failed(c: EvidenceCell) -> bool:
    return bool(c.get("attention_backend") == "FLASH_ATTN" and c.get("fa_version") and c.failed)


def _static_prediction(c: EvidenceCell, best: Pair, sm: int) -> list[str]:
    """Warnings from the ELF scan's cell of a chosen backend on this GPU."""
    out: list[str] = []
    if c.failed:
        out.append(
            f"the static scan ({Path(c.source).name}) predicts {c.get('backend')} "
            f"{c.get('outcome')} on sm_{sm}: {str(c.get('root_cause'))[:160]} — the evidence above came "
            "from another image; run `probe scan` on yours"
        )
    if best.moe and c.get("moe_backend") == best.moe and c.get("details", {}).get("verdict") == "ptx-jit":
        via = c.cell["details"].get("via")
        out.append(
            f"{best.moe} MoE runs from PTX JIT on this GPU"
            + (f" ({via})" if via else "")
            + ": first start is slower and needs a driver that knows the PTX ISA"
        )
    return out


def predictions_and_reports(mine: list[EvidenceCell], best: Pair, req: Request) -> list[str]:
    """The ELF scan against the chosen pair (its quant's variant), and FlashAttention failures in
    the scan and in field reports."""
    out: list[str] = []
    chosen = [("attention", best.attn, best.fa)] + ([("moe", best.moe, None)] if best.moe else [])
    for role, backend, fa in chosen:
        c = scan_cell(mine, req, role, backend, fa)
        if c is not None:
            out += _static_prediction(c, best, req.sm)
    for c in mine:
        if not _fa_failed(c) or c.get("fa_version") == best.fa or c.get("basis") == "vllm_check":
            continue
        if c.evidence == "reported":
            if c.get("applies") and not report_match.relevant(c, req):
                continue  # a report whose model facts (MLA, sinks …) or set-up this model does not share
            out.append(
                f"FA{c.get('fa_version')} {c.get('outcome')} on sm_{req.sm} in a field report: "
                f"{c.get('root_cause')}"
            )
        elif c.evidence == "predicted":
            what = "has no code for" if c.get("outcome") == "no_kernel_image" else "cannot run on"
            out.append(f"FA{c.get('fa_version')} {what} sm_{req.sm}: {c.get('root_cause')}")
    return out


def disagreeing_reports(
    mine: list[EvidenceCell],
    best: Pair,
    relevant: list[EvidenceCell],
    req: Request,
    moe_here: str | None = None,
) -> list[str]:
    """Field reports of a failure of the chosen backends (``moe_here``: what ``auto`` resolves to), where
    measurements say they work."""
    out: list[str] = []
    if not any(c.evidence == "measured" for c in best.cells):
        return out
    moes = {best.moe, moe_here} - {None}
    for c in mine:
        same_attn = c.get("attention_backend") == best.attn and c.get("fa_version") in (None, best.fa)
        if (
            c.evidence == "reported"
            and c.failed
            and (c.get("moe_backend") in moes or same_attn)
            and c in relevant
        ):
            out.append(
                f"a field report disagrees: {c.get('backend')} {c.get('outcome')} "
                f"({c.get('root_cause')}) — {c.get('citation')}"
            )
    return out


def other_model_reports(mine: list[EvidenceCell], best: Pair, req: Request) -> list[str]:
    """Field reports of a failure of the chosen backends on another model."""
    out: list[str] = []
    for c in mine:
        if (
            c.evidence == "reported"
            and c.failed
            and c.get("model")
            and not c.get("applies")
            and not req.is_model(c.get("model"))
            and c.get("quant") in (None, req.quant)
            and ((best.moe and c.get("moe_backend") == best.moe) or c.get("attention_backend") == best.attn)
        ):
            out.append(
                f"on {c.get('model')} a field report saw {c.get('backend')} {c.get('outcome')} "
                f"on sm_{req.sm} ({c.get('root_cause')}): probe this model's shape before relying on it"
            )
    return out


def degraded(best: Pair) -> list[str]:
    return [f"{c.get('backend')}: degraded: {r}" for c in best.cells for r in c.get("degraded_reasons") or []]
