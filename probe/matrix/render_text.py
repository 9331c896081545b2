"""Terminal table and Markdown renderings of a matrix or fleet (tabulate)."""

from __future__ import annotations

from typing import Any

from probe.matrix.lazy import summary_cells
from probe.matrix.schema import Cell, Fleet, Matrix
from probe.matrix.table import text_table

MAX_CAUSE = 90


def shape_label(c: Cell) -> str:
    if c.evidence == "predicted" and c.gpu_sm is not None:
        return f"sm_{c.gpu_sm}"  # a static prediction is about a GPU, not a layer shape
    if c.kind == "moe":
        parts = [
            f"E={c.experts}" if c.experts else "",
            f"H={c.hidden}" if c.hidden else "",
            f"I={c.intermediate}" if c.intermediate else "",
            f"tp={c.tp}" if c.tp else "",
        ]
        return " ".join(p for p in parts if p) or (c.model or "-")
    if c.kind == "attention":
        parts = [
            f"H={c.num_heads}" if c.num_heads else "",
            f"KV={c.num_kv_heads}" if c.num_kv_heads else "",
            f"D={c.head_dim}" if c.head_dim else "",
        ]
        return " ".join(p for p in parts if p) or (c.model or "-")
    if c.kind == "engine":
        dp = c.params.get("data_parallel_size")
        parts = [
            c.model or "-",
            f"tp={c.tp}" if c.tp and c.tp > 1 else "",
            f"dp={dp}" if isinstance(dp, int) and dp > 1 else "",
            "ep" if c.params.get("enable_expert_parallel") else "",
        ]
        return " ".join(p for p in parts if p)
    return "-"


def backend_label(c: Cell) -> str:
    if c.kind == "engine":
        label = "+".join(x for x in (c.moe_backend, c.attention_backend) if x) or (c.backend or "-")
    else:
        label = c.backend or "-"
    if c.fa_version:
        label += f" (FA{c.fa_version})"
    for key, value in sorted(c.engine_args.items()):
        label += f" {key}={value}"
    return label


def timing_label(c: Cell) -> str:
    t = c.timings
    for key, unit in (
        ("tokens_per_s", " tok/s"),
        ("forward_ms_b1", " ms b1"),
        ("decode_ms", " ms decode"),
        ("prefill_ms", " ms prefill"),
        ("forward_ms_b64", " ms b64"),
    ):
        if key in t:
            return f"{t[key]:g}{unit}"
    return ""


def outcome_label(c: Cell) -> str:
    label = c.outcome.value
    if c.degraded:
        label += " (degraded)"
    if c.evidence != "measured":
        label += f" [{c.evidence}]"
    return label


def short(text: str | None, n: int = MAX_CAUSE) -> str:
    if not text:
        return ""
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


def provenance_lines(m: Matrix) -> list[str]:
    p = m.provenance
    v = p.versions
    gpu = p.gpu
    lines = [
        f"image: {p.image or '-'}" + (f" @ {p.image_digest}" if p.image_digest else ""),
        f"host: {p.host or '-'}  time: {p.created_at}  probe {p.probe_version}  run: {m.run.status}"
        + (f" ({m.run.infra_error})" if m.run.infra_error else ""),
        "gpu: "
        + (
            f"{gpu.name or '?'} sm_{gpu.sm} (cc {gpu.cc}), {gpu.memory_gib or '?'} GiB"
            + (", integrated" if gpu.integrated else "")
            + (", unified memory" if gpu.unified_memory else "")
            if gpu and gpu.sm
            else "none recorded"
        ),
        "versions: " + ", ".join(f"{k} {val}" for k, val in v.model_dump().items() if val),
    ]
    if m.static is not None:
        lines.append(
            f"static: {len(m.static.files)} files, {len(m.static.backends)} backends"
            + (
                f" ({', '.join(f'{k} {val}' for k, val in m.static.packages.items())})"
                if m.static.packages
                else ""
            )
        )
    return lines


def _matrix_rows(m: Matrix) -> list[list[str]]:
    return [
        [
            c.kind,
            backend_label(c),
            c.quant or "",
            shape_label(c),
            outcome_label(c),
            c.phase or "",
            timing_label(c),
            short(c.root_cause),
        ]
        for c in summary_cells(m.cells)
    ]


HEADERS = ["kind", "backend", "quant", "shape", "outcome", "phase", "timing", "root cause"]


def fleet_rows(f: Fleet) -> tuple[list[str], list[list[str]]]:
    """One row per cell id (first seen), one outcome column per member (``—``: not measured there)."""
    heads: dict[str, list[str]] = {}
    outcomes: list[dict[str, str]] = []
    for m in f.matrices:
        mine: dict[str, str] = {}
        for c in summary_cells(m.cells):
            if c.id not in heads:
                heads[c.id] = [c.kind, backend_label(c), c.quant or "", shape_label(c)]
            mine.setdefault(c.id, outcome_label(c))
        outcomes.append(mine)
    rows = [[*head, *(o.get(cid, "—") for o in outcomes)] for cid, head in heads.items()]
    return ["kind", "backend", "quant", "shape", *f.columns], rows


def render_table(doc: Matrix | Fleet, fmt: str = "simple") -> str:
    out: list[str] = []
    if isinstance(doc, Fleet):
        for label, m in zip(doc.columns, doc.matrices, strict=True):
            out.append(f"[{label}] " + " | ".join(provenance_lines(m)[:3]))
        headers, rows = fleet_rows(doc)
        out.append(text_table(headers, rows, fmt))
        return "\n".join(out) + "\n"
    out.extend(provenance_lines(doc))
    out.append("")
    out.append(text_table(HEADERS, _matrix_rows(doc), fmt))
    return "\n".join(out) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def render_markdown(doc: Matrix | Fleet) -> str:
    out: list[str] = ["# probe matrix", ""]
    members: list[tuple[str, Matrix]] = (
        list(zip(doc.columns, doc.matrices, strict=True))
        if isinstance(doc, Fleet)
        else [(doc.column_label(), doc)]
    )
    for label, m in members:
        out.append(f"**{_md_escape(label)}**")
        out.append("")
        out.extend(f"- {_md_escape(line)}" for line in provenance_lines(m))
        out.append("")
    if isinstance(doc, Fleet):
        headers, rows = fleet_rows(doc)
    else:
        headers, rows = HEADERS, _matrix_rows(doc)
    rows = [[_md_escape(x) for x in r] for r in rows]
    out.append(text_table([_md_escape(h) for h in headers], rows, "github"))
    return "\n".join(out) + "\n"


def summary_counts(cells: list[Cell]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.outcome.value] = counts.get(c.outcome.value, 0) + 1
    return counts
