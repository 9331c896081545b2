"""How ``probe reports`` shows the base: a list a user can act on (grouped by GPU, open failures
first, each with its versions, workaround and link), the same as JSON, and the coverage table
(GPU x backend family: number of reports) the README carries."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from probe.catalog.gpus import catalog
from probe.reports import vocab
from probe.reports.base import features_fit
from probe.reports.ranges import VersionStatus, fix_text, seen_text
from probe.reports.record import Report

KIND_WORDS = {"moe": "MoE", "attention": "attention", "engine": "engine", "gemm": "GEMM"}


@dataclass(frozen=True)
class Listed:
    """A report as listed for one GPU, with its version status (None: no version asked)."""

    sm: int
    report: Report
    status: VersionStatus | None


def order(items: Sequence[Listed]) -> list[Listed]:
    """By GPU, then backend; open failures first, then fixed ones, then reports of what worked;
    newest first."""

    def key(x: Listed) -> tuple[Any, ...]:
        r = x.report
        rank = 0 if r.is_open else (1 if r.outcome != "ok" else 2)
        return x.sm, r.backend.lower(), rank

    newest_first = sorted(items, key=lambda x: x.report.date, reverse=True)
    return sorted(newest_first, key=key)


def gpu_label(sm: int) -> str:
    g = catalog().by_sm(sm)
    return f"sm_{sm} ({', '.join(g.names[:2])})" if g else f"sm_{sm}"


def _state(x: Listed) -> str:
    r = x.report
    if x.status is not None:
        return x.status.note
    seen = seen_text(r)
    seen = seen if seen == "versions unknown" else f"seen on {seen}"
    if r.outcome == "ok":
        return seen
    if r.fixed_in:
        return f"{fix_text(r)}; {seen}"
    return f"{seen}; open as of {r.open_as_of}"


def _what(r: Report) -> str:
    bits = [f"FA{r.fa_version}"] if r.fa_version else []
    bits += [r.quant] if r.quant else []
    bits += [f"{k}={v}" for k, v in r.features.items() if vocab.FEATURES[k][0] != "setup"]
    return " ".join(bits)


def _fix_line(r: Report) -> str | None:
    w = r.workaround
    parts = []
    if w is not None:
        env = " ".join(f"{k}={v}" for k, v in w.env.items())
        flags = " ".join(w.flags)
        cmd = " ".join(x for x in (env, flags) if x)
        parts.append(cmd + (f" ({w.note})" if w.note and cmd else w.note or ""))
    if r.works_with:
        parts.append("worked instead: " + ", ".join(r.works_with))
    return "; ".join(p for p in parts if p) or None


def _scope(r: Report) -> str:
    """What a failure is limited to, in a word: the quant (a MoE / GEMM report), the model facts (an
    attention report: its quant does not limit it)."""
    if r.kind != "attention":
        return r.quant or "any"
    facts = [k if v is True else f"{k}={v}" for k, v in r.features.items() if vocab.FEATURES[k][0] == "model"]
    return "+".join(facts) or "any"


def _failures(items: Sequence[Listed], model_specific: bool) -> str:
    found: dict[str, set[str]] = {}
    for x in items:
        r = x.report
        default = features_fit(r.features, {})  # fails in vLLM's default set-up
        if r.failed and r.is_open and default and r.model_specific == model_specific:
            label = r.backend + (f" FA{r.fa_version}" if r.fa_version else "")
            found.setdefault(label, set()).add(_scope(r))
    return ", ".join(
        f"{b} ({'/'.join(sorted(q))})" for b, q in sorted(found.items(), key=lambda kv: kv[0].lower())
    )


def summary(items: Sequence[Listed]) -> list[str]:
    """The lines a user would write by hand: what fails for any model, what failed on the models
    named in the reports, what was seen working."""
    worked: dict[str, None] = {}
    for x in items:
        if x.report.outcome == "ok":
            worked.setdefault(x.report.backend)
        for w in x.report.works_with:
            worked.setdefault(w)
    seen = ", ".join(sorted(worked, key=str.lower)) or "none reported"
    return [
        f"  open failures, any model: {_failures(items, False) or 'none'}",
        f"  open failures, on the models named: {_failures(items, True) or 'none'}",
        f"  seen working: {seen}",
    ]


def _block(x: Listed) -> list[str]:
    r = x.report
    tag = "OPEN" if r.is_open else ("fixed" if r.outcome != "ok" else "works")
    what = _what(r)
    out = [
        f"    {tag:5} {r.outcome}{' [' + what + ']' if what else ''} - {_state(x)}",
        f"          {r.symptom}",
    ]
    if r.outcome != "ok" and r.root_cause:
        out.append(f"          cause: {r.root_cause}")
    if (fix := _fix_line(r)) is not None:
        out.append(f"          fix: {fix}")
    models = f" (seen on {', '.join(r.models[:2])}{' …' if len(r.models) > 2 else ''})" if r.models else ""
    return [*out, f"          {r.where}{models}"]


def render_text(items: Sequence[Listed], asked: str | None = None) -> str:
    """The list, grouped by GPU (a two-line summary first) and backend; one block per report."""
    if not items:
        return "no field report applies" + (f" ({asked})" if asked else "") + "\n"
    lines: list[str] = []
    last: tuple[int, str] | None = None
    for x in order(items):
        r = x.report
        if last is None or x.sm != last[0]:
            mine = [y for y in items if y.sm == x.sm]
            head = f"{gpu_label(x.sm)}: {len(mine)} report{'s' * (len(mine) != 1)}" + (
                f" at {asked}" if asked else ""
            )
            lines += ([""] if lines else []) + [head, *summary(mine)]
        if last != (x.sm, r.backend):
            lines += ["", f"  {r.backend} ({KIND_WORDS.get(r.kind, r.kind)})"]
            last = (x.sm, r.backend)
        lines += _block(x)
    return "\n".join(lines) + "\n"


def as_json(items: Sequence[Listed]) -> list[dict[str, Any]]:
    return [
        {
            **x.report.to_dict(),
            "gpu": f"sm_{x.sm}",
            "status": None if x.status is None else {"state": x.status.state, "note": x.status.note},
        }
        for x in order(items)
    ]


def coverage(reports: Sequence[Report]) -> tuple[list[str], list[tuple[str, list[int]]]]:
    """(columns, rows): per GPU of the catalog, the number of reports per backend family (a report
    seen on several GPUs counts once for each)."""
    cols = list(vocab.FAMILY_ORDER)
    counts: dict[int, list[int]] = {}
    for r in reports:
        fam = cols.index(vocab.backend_family(r.kind, r.backend))
        for sm in r.gpus:
            counts.setdefault(sm, [0] * len(cols))[fam] += 1
    rows = [(gpu_label(sm), counts[sm]) for sm in sorted(counts)]
    return cols, rows


def coverage_markdown(reports: Sequence[Report]) -> str:
    cols, rows = coverage(reports)
    head = ["GPU", *cols, "all"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, counts in rows:
        cells = [str(n) if n else "" for n in counts]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {sum(counts)} |")
    totals = [sum(c[i] for _, c in rows) for i in range(len(cols))]
    lines.append("| **all** | " + " | ".join(str(t) for t in totals) + f" | {sum(totals)} |")
    note = f"\n{len(reports)} reports; one seen on several GPUs counts on each of their rows.\n"
    return "\n".join(lines) + "\n" + note


SHORT = {
    "Marlin MoE": "marlin",
    "CUTLASS MoE": "cutlass",
    "FlashInfer MoE": "fi-moe",
    "Triton MoE": "triton",
    "DeepGEMM MoE": "deepgemm",
    "other MoE": "moe-oth",
    "MLA": "mla",
    "FlashAttention": "fa",
    "FlashInfer attention": "fi-attn",
    "Triton attention": "tri-attn",
    "FlexAttention": "flex",
    "other attention": "attn-oth",
    "dense GEMM": "gemm",
}


def coverage_text(reports: Sequence[Report]) -> str:
    """The coverage table for a terminal (short column names; --format md has the full ones)."""
    cols, rows = coverage(reports)
    short = [SHORT.get(c, "other") for c in cols]
    width = max([len(label) for label, _ in rows] + [3])
    out = [f"{'GPU':{width}}  " + " ".join(f"{c:>8}" for c in short) + "      all"]
    for label, counts in rows:
        out.append(f"{label:{width}}  " + " ".join(f"{n or '':>8}" for n in counts) + f"  {sum(counts):>7}")
    return "\n".join(out) + f"\n{len(reports)} reports (one seen on several GPUs counts on each row)\n"
