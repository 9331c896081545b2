"""What ``probe scan`` says besides its report: the one line on stderr when it ends partial (exit 5),
and the cuobjdump verification block of the text report."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from probe.arch.records import ScanReport


def exit_code(report: ScanReport) -> int:
    """5 (partial: files with errors, or cuobjdump disagreeing) with one line on stderr saying why,
    else 0."""
    from probe.errors import EXIT_OK, EXIT_PARTIAL

    partial = report.summary.errors > 0 or bool(
        report.verify and (report.verify.disagreements or report.verify.errors)
    )
    if partial:
        print(f"probe scan: {partial_reason(report)}", file=sys.stderr)
    return EXIT_PARTIAL if partial else EXIT_OK


def partial_reason(report: ScanReport) -> str:
    """One line for stderr: why the exit code is 5 (the output has the details)."""
    bad = [f for f in report.files if f.error]
    if bad:
        first = bad[0]
        error = first.error if len(first.error or "") <= 200 else (first.error or "")[:200] + "…"
        return (
            f"{len(bad)} of {report.summary.files} files could not be read (exit 5); first: "
            f"{first.path}: {error}"
        )
    v = report.verify
    n = len(v.disagreements) + len(v.errors) if v is not None else 0
    return f"cuobjdump disagrees with probe or fails on {n} file(s) (exit 5)"


def table(rows: Any, headers: Any, tablefmt: str) -> str:
    from tabulate import tabulate

    return str(tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True))


def render_verify(report: ScanReport, tablefmt: str) -> str:
    v = report.verify
    assert v is not None
    if v.cuobjdump is None:
        return "cuobjdump verification: cuobjdump not found (install nvidia-cuda-cuobjdump or set CUDA_HOME)"
    lines = [f"cuobjdump verification ({v.cuobjdump}): {v.files_agree}/{v.files_checked} files agree"]
    if v.disagreements:
        rows = [[d.get("path"), d.get("what"), d.get("probe"), d.get("cuobjdump")] for d in v.disagreements]
        lines.append(table(rows, ["file", "listing", "probe only", "cuobjdump only"], tablefmt))
    if v.errors:
        rows = [[e.get("path"), e.get("error")] for e in v.errors]
        lines.append(table(rows, ["file", "cuobjdump error"], tablefmt))
    return "\n".join(lines)
