"""CI gate: compare the current image's matrix with a baseline and fail on regressions.

Regressions: a cell that passed and now fails (or is missing), a required arch lost
(--require-arch sm_110a:PATTERN, PATTERN = a file name/path or kernel name, glob or substring), a
model whose recommendation disappears, or whose best pair got slower than --slowdown. Warnings (never
a failure): an open field report of a recommended backend on this GPU whose version range holds the
current image's versions (the packaged base, --reports FILE and $PROBE_REPORTS).

Exit codes: 0 nothing regressed; 1 regression found; 2 usage/config error; 3 nothing to compare;
4 probe infrastructure failed (the current run recorded an infra failure or lost most cells);
6 bad matrix file. Writes --junit XML, a Markdown summary to $GITHUB_STEP_SUMMARY (or --summary),
and ::error annotations when $GITHUB_ACTIONS=true.

Example:  probe gate --baseline published.json --current matrix.json --models 122b,35b \\
            --require-arch 'sm_110a:*_moe_C*' --junit gate.xml
"""

from __future__ import annotations

import argparse


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", required=True, metavar="OLD", help="baseline matrix (last published)")
    p.add_argument("--current", required=True, metavar="NEW", help="matrix of the image under test")
    p.add_argument(
        "--models",
        help="comma-separated models whose recommendation must survive "
        "(default: the models the matrices cover)",
    )
    p.add_argument(
        "--require-arch",
        action="append",
        default=[],
        metavar="ARCH:PATTERN",
        help="an arch that must stay in matching files/kernels (repeatable)",
    )
    p.add_argument(
        "--slowdown",
        type=float,
        default=0.10,
        help="allowed slowdown of a model's best pair, as a fraction (default 0.10)",
    )
    p.add_argument(
        "--max-missing",
        type=float,
        default=0.5,
        help="fraction of baseline cells that may be missing before it counts as an "
        "infrastructure failure (default 0.5)",
    )
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    p.add_argument(
        "--summary",
        metavar="FILE",
        help="append the Markdown summary to FILE (default: $GITHUB_STEP_SUMMARY when set)",
    )
    p.add_argument(
        "--reports",
        action="append",
        metavar="FILE",
        help="extra field-report file to warn from (repeatable; also $PROBE_REPORTS)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def execute(args: argparse.Namespace) -> int:
    import json
    import os

    from probe.cli.flags import output_file, with_flag_errors, written
    from probe.decide.regressions import gate_junit, gate_markdown, github_annotations, run_gate
    from probe.matrix.io import load_matrix, write_text_atomic
    from probe.reports.base import env_report_files, load_reports

    summary = args.summary or os.environ.get("GITHUB_STEP_SUMMARY")
    if args.junit:
        output_file(args.junit, "--junit")
    if summary:
        output_file(summary, "--summary" if args.summary else "$GITHUB_STEP_SUMMARY")
    baseline, current = load_matrix(args.baseline), load_matrix(args.current)
    reports = load_reports([*(args.reports or []), *env_report_files()])
    models = None
    if args.models:
        from probe.modelcfg.resolve import resolve_model

        models = [resolve_model(m.strip()).name for m in args.models.split(",") if m.strip()]
    rep = with_flag_errors(
        lambda: run_gate(
            baseline,
            current,
            models=models,
            required=args.require_arch,
            slowdown=args.slowdown,
            max_missing=args.max_missing,
            reports=reports,
        )
    )
    md = gate_markdown(rep, baseline, current)
    if args.junit:
        written("--junit", args.junit, lambda: write_text_atomic(args.junit, gate_junit(rep)))
    if summary:

        def append() -> None:
            from probe.outfile import open_for_write

            with open_for_write(summary, append=True) as fh:
                fh.write(md)

        written("--summary", summary, append)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(rep):
            print(line)
    if args.json:
        print(json.dumps(rep.to_dict(), indent=1))
    else:
        print(f"probe gate: {rep.verdict} (exit {rep.exit_code})")
        for c in rep.checks:
            mark = "FAIL" if not c.ok else ("warn" if c.warning else "ok")
            print(f"  [{mark}] {c.group}: {c.message}")
    return rep.exit_code
