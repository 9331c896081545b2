"""JUnit XML: one testsuite per matrix, one testcase per cell (failure / skipped by outcome)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from probe.matrix.render_text import backend_label, shape_label
from probe.matrix.schema import Fleet, Matrix

_XML_BAD = dict.fromkeys([*range(0, 9), 11, 12, *range(14, 32)])


def _clean(text: str | None) -> str:
    """XML 1.0 cannot hold most control characters (ANSI colour codes in logs): drop them."""
    return (text or "").translate(_XML_BAD)


def junit_tree(doc: Matrix | Fleet) -> ET.Element:
    members = (
        list(zip(doc.columns, doc.matrices, strict=True))
        if isinstance(doc, Fleet)
        else [(doc.column_label(), doc)]
    )
    root = ET.Element("testsuites", name="probe matrix")
    total = fails = skips = 0
    for label, m in members:
        suite = ET.SubElement(root, "testsuite", name=_clean(label))
        n_fail = n_skip = 0
        for c in m.cells:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=_clean(f"probe.{c.kind}.{backend_label(c)}"),
                name=_clean(f"{c.id} [{shape_label(c)}]"),
                time=f"{c.wall_s:.3f}",
            )
            if c.outcome.failed:
                n_fail += 1
                el = ET.SubElement(
                    case, "failure", type=c.outcome.value, message=_clean(c.root_cause or c.outcome.value)
                )
                el.text = _clean(
                    "\n".join(
                        x
                        for x in (
                            f"phase: {c.phase}" if c.phase else "",
                            f"evidence: {c.evidence}",
                            c.citation or "",
                            c.log_excerpt or "",
                        )
                        if x
                    )
                )
            elif c.outcome.value in ("skipped", "not_run"):  # not_run: unknown, never a failure
                n_skip += 1
                why = "not applicable" if c.outcome.value == "skipped" else "not run"
                ET.SubElement(case, "skipped", message=_clean(c.root_cause or why))
        suite.set("tests", str(len(m.cells)))
        suite.set("failures", str(n_fail))
        suite.set("skipped", str(n_skip))
        suite.set("errors", "0")
        total += len(m.cells)
        fails += n_fail
        skips += n_skip
    root.set("tests", str(total))
    root.set("failures", str(fails))
    root.set("skipped", str(skips))
    return root


def render_junit(doc: Matrix | Fleet) -> str:
    root = junit_tree(doc)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
