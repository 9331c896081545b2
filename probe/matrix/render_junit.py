"""JUnit XML: one testsuite per matrix, one testcase per cell (failure / skipped by outcome).

Written as it goes (:func:`iter_junit`): a matrix of 100,000 cells is never an element tree in
memory; the full cell (for its log excerpt) is read only for a failed one.
"""

from __future__ import annotations

from collections.abc import Iterator

from probe.matrix.lazy import summaries, summary_cell
from probe.matrix.render_text import backend_label, shape_label
from probe.matrix.schema import Cell, Fleet, Matrix
from probe.outcomes import Outcome

_XML_BAD = dict.fromkeys([*range(0, 9), 11, 12, *range(14, 32)])
_ATTR = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#09;"}
)
_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def _clean(text: str | None) -> str:
    """XML 1.0 cannot hold most control characters (ANSI colour codes in logs): drop them."""
    return (text or "").translate(_XML_BAD)


def _attrs(**kv: str) -> str:
    return "".join(f' {k}="{_clean(v).translate(_ATTR)}"' for k, v in kv.items())


def _case(c: Cell, full: Cell | None) -> str:
    """One ``<testcase>``; ``full``: the whole cell (its log excerpt) for a failed one."""
    head = "    <testcase" + _attrs(
        classname=f"probe.{c.kind}.{backend_label(c)}",
        name=f"{c.id} [{shape_label(c)}]",
        time=f"{c.wall_s:.3f}",
    )
    if c.outcome.failed:
        f = full or c
        text = "\n".join(
            x
            for x in (
                f"phase: {f.phase}" if f.phase else "",
                f"evidence: {f.evidence}",
                f.citation or "",
                f.log_excerpt or "",
            )
            if x
        )
        failure = _attrs(type=c.outcome.value, message=c.root_cause or c.outcome.value)
        body = (
            f"<failure{failure}>{_clean(text).translate(_TEXT)}</failure>"
            if text
            else f"<failure{failure} />"
        )
        return f"{head}>\n      {body}\n    </testcase>\n"
    if c.outcome in (Outcome.SKIPPED, Outcome.NOT_RUN):  # not_run: unknown, never a failure
        why = c.root_cause or ("not applicable" if c.outcome is Outcome.SKIPPED else "not run")
        return f"{head}>\n      <skipped{_attrs(message=why)} />\n    </testcase>\n"
    return head + " />\n"


def iter_junit(doc: Matrix | Fleet) -> Iterator[str]:
    members = (
        list(zip(doc.columns, doc.matrices, strict=True))
        if isinstance(doc, Fleet)
        else [(doc.column_label(), doc)]
    )
    counts = []
    for _label, m in members:
        sums = summaries(m.cells)
        fails = sum(1 for s in sums if Outcome(s["outcome"]).failed)
        skipped = sum(1 for s in sums if s["outcome"] in ("skipped", "not_run"))  # not_run: unknown
        counts.append((len(sums), fails, skipped))
    total = [sum(c[i] for c in counts) for i in range(3)]
    yield '<?xml version="1.0" encoding="utf-8"?>\n'
    yield "<testsuites" + _attrs(
        name="probe matrix", tests=str(total[0]), failures=str(total[1]), skipped=str(total[2])
    )
    yield ">\n" if members else " />\n"
    for (label, m), (n, fails, skips) in zip(members, counts, strict=True):
        suite = _attrs(name=label, tests=str(n), failures=str(fails), skipped=str(skips), errors="0")
        if not n:
            yield f"  <testsuite{suite} />\n"
            continue
        yield f"  <testsuite{suite}>\n"
        for i, s in enumerate(summaries(m.cells)):
            c = summary_cell(s)
            yield _case(c, m.cells[i] if c.outcome.failed else None)
        yield "  </testsuite>\n"
    if members:
        yield "</testsuites>\n"


def render_junit(doc: Matrix | Fleet) -> str:
    return "".join(iter_junit(doc))
