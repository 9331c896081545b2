"""A single-file static HTML page: provenance header and outcome grids (no external resources).

Every string that can come from a log, a file or a user (root causes, ids, image names) goes
through ``html.escape``; the page has no script.
"""

from __future__ import annotations

from collections.abc import Iterator
from html import escape

from probe.matrix.lazy import summary_cells
from probe.matrix.render_text import backend_label, provenance_lines, shape_label, timing_label
from probe.matrix.schema import Cell, Fleet, Matrix
from probe.outcomes import OUTCOME_HELP, Outcome

COLOURS: dict[str, str] = {
    "ok": "#2e7d32",
    "wrong_output": "#6a1b9a",
    "unsupported": "#9e9e9e",
    "no_kernel_image": "#c62828",
    "jit_failed": "#d84315",
    "import_error": "#ad1457",
    "api_mismatch": "#ef6c00",
    "kernel_init_failed": "#e65100",
    "device_fault": "#b71c1c",
    "oom": "#4e342e",
    "timeout": "#5d4037",
    "crashed": "#880e4f",
    "skipped": "#cfd8dc",
    "not_run": "#90a4ae",
    "missing": "#ffffff",
}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2em;color:#111}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.4em 0}
th,td{border:1px solid #bbb;padding:.25em .45em;font-size:.85em;vertical-align:top}
th{background:#eceff1;text-align:left}
td.cell{position:relative;min-width:6.5em;color:#fff}
td.cell .o{font-weight:600;display:block}td.cell .t{font-size:.85em;opacity:.9}
td.cell .tip{display:none;position:absolute;left:0;top:100%;z-index:10;background:#212121;color:#fff;
 padding:.4em .6em;width:28em;white-space:pre-wrap;font-size:.8em;border-radius:4px}
td.cell:hover .tip{display:block}
td.degraded{outline:3px dashed #ffd600;outline-offset:-3px}
td.o-skipped,td.o-missing{color:#333}
td.ev-predicted,td.ev-reported{background-image:repeating-linear-gradient(45deg,transparent 0 6px,
 rgba(255,255,255,.18) 6px 12px)}
.prov td{color:#111}.legend span{display:inline-block;margin:.15em .4em .15em 0;padding:.1em .4em;color:#fff;
 font-size:.8em;border-radius:3px}
"""


def _css() -> str:
    rules = [f"td.o-{name}{{background:{colour}}}" for name, colour in COLOURS.items()]
    rules += [f".legend .o-{name}{{background:{colour}}}" for name, colour in COLOURS.items()]
    return CSS + "\n".join(rules)


def _tooltip(c: Cell) -> str:
    parts = [
        f"{c.id}",
        f"outcome: {c.outcome.value}" + (" (degraded)" if c.degraded else ""),
        f"evidence: {c.evidence}",
    ]
    if c.phase:
        parts.append(f"phase: {c.phase}")
    if c.root_cause:
        parts.append(f"root cause: {c.root_cause}")
    if c.exit_code is not None or c.signal:
        parts.append(f"exit: {c.exit_code if c.exit_code is not None else '-'} {c.signal or ''}".rstrip())
    parts.extend(f"degraded: {r}" for r in c.degraded_reasons)
    if c.hint:
        parts.append(f"hint: {c.hint}")
    if c.citation:
        parts.append(f"source: {c.citation}")
    if c.timings:
        parts.append("timings: " + ", ".join(f"{k}={v:g}" for k, v in c.timings.items()))
    return "\n".join(parts)


def _td(c: Cell | None) -> str:
    if c is None:
        return '<td class="cell o-missing"><span class="o">—</span></td>'
    cls = f"cell o-{c.outcome.value} ev-{c.evidence}" + (" degraded" if c.degraded else "")
    tip = _tooltip(c)
    return (
        f'<td class="{cls}" title="{escape(tip)}" data-cell-id="{escape(c.id)}" '
        f'data-outcome="{c.outcome.value}"><span class="o">{escape(c.outcome.value)}</span>'
        f'<span class="t">{escape(timing_label(c))}</span><span class="tip">{escape(tip)}</span></td>'
    )


class _Grid:
    """Rows: backend (x quant for MoE); columns: the shape (expert count, head layout, model). Each
    position shows its first cell (kept as its rendered ``<td>``, not as a cell)."""

    def __init__(self, title: str, kinds: tuple[str, ...], row_key: str) -> None:
        self.title, self.kinds, self.row_key = title, kinds, row_key
        self.tds: dict[tuple[str, str], str] = {}

    def add(self, c: Cell) -> None:
        if c.kind not in self.kinds:
            return
        if c.kind in ("import", "fixture"):
            row = c.id
        else:
            row = backend_label(c) + (f" · {c.quant}" if self.row_key == "backend_quant" and c.quant else "")
        col = shape_label(c)
        if c.model and c.kind == "moe" and c.model not in col:
            col = f"{col} ({c.model})"
        if (row, col) not in self.tds:
            self.tds[(row, col)] = _td(c)

    def html(self) -> str:
        if not self.tds:
            return ""
        rows = sorted({r for r, _ in self.tds})
        cols = sorted({col for _, col in self.tds}, key=lambda k: (len(k), k))
        head = "".join(f"<th>{escape(col)}</th>" for col in cols)
        body = [
            f"<tr><th>{escape(r)}</th>"
            + "".join(self.tds.get((r, col)) or _td(None) for col in cols)
            + "</tr>"
            for r in rows
        ]
        return (
            f'<h2>{escape(self.title)}</h2>\n<table class="grid"><tr><th>backend</th>{head}</tr>\n'
            + "\n".join(body)
            + "</table>\n"
        )


def _legend() -> str:
    spans = "".join(
        f'<span class="o-{o.value}" title="{escape(OUTCOME_HELP[o])}">{o.value}</span>' for o in Outcome
    )
    note = "dashed outline: degraded; hatched: predicted / reported"
    return f'<p class="legend">{spans} <small>{note}</small></p>'


def _prov(label: str, m: Matrix) -> str:
    rows = "".join(f"<tr><td>{escape(line)}</td></tr>" for line in provenance_lines(m))
    return f'<table class="prov"><tr><th>{escape(label)}</th></tr>{rows}</table>'


GRIDS = (
    ("MoE backends x quant (columns: expert count and layer shape)", ("moe",), "backend_quant"),
    ("Attention backends (columns: heads / KV heads / head size)", ("attention",), "backend"),
    ("Engine pairings (columns: model)", ("engine",), "backend"),
    ("Imports and fixtures", ("import", "fixture"), "backend"),
)


def _fleet_grids(doc: Fleet) -> Iterator[str]:
    """One table per cell kind: a row per cell id (first seen), a column per member."""
    heads: dict[str, tuple[str, str]] = {}  # id -> (kind, row label)
    tds: list[dict[str, str]] = []
    for m in doc.matrices:
        mine: dict[str, str] = {}
        for c in summary_cells(m.cells):
            if c.id not in heads:
                heads[c.id] = (c.kind, f"{backend_label(c)} · {c.quant or ''} · {shape_label(c)}")
            if c.id not in mine:
                mine[c.id] = _td(c)
        tds.append(mine)
    head = "".join(f"<th>{escape(col)}</th>" for col in doc.columns)
    for kind in ("moe", "attention", "engine", "import", "fixture"):
        body = [
            f"<tr><th>{escape(label)}</th>" + "".join(t.get(cid) or _td(None) for t in tds) + "</tr>"
            for cid, (k, label) in heads.items()
            if k == kind
        ]
        if body:
            yield (
                f'<h2>{escape(kind)}</h2><table class="grid"><tr><th>cell</th>{head}</tr>'
                + "\n".join(body)
                + "</table>"
            )


def render_html(doc: Matrix | Fleet) -> str:
    title = "probe matrix"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_css()}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
    ]
    if isinstance(doc, Fleet):
        parts.extend(_prov(label, m) for label, m in zip(doc.columns, doc.matrices, strict=True))
        parts.append(_legend())
        parts.extend(_fleet_grids(doc))
    else:
        parts.append(_prov(doc.column_label(), doc))
        parts.append(_legend())
        grids = [_Grid(*g) for g in GRIDS]
        for c in summary_cells(doc.cells):
            for g in grids:
                g.add(c)
        parts.extend(g.html() for g in grids)
        if doc.static is not None and doc.static.files:
            rows = "".join(
                f"<tr><td>{escape(f.path)}</td><td>{escape(f.package or '')}</td>"
                f"<td>{escape(' '.join(f.arches))}</td><td>{escape(f.error or '')}</td></tr>"
                for f in doc.static.files
            )
            parts.append(
                "<h2>Static scan: arches per file</h2><table><tr><th>file</th><th>package</th>"
                f"<th>arches</th><th>error</th></tr>{rows}</table>"
            )
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"
