"""Run the probe plan in sandboxed children, journal every cell, and publish the matrix.

Each cell runs in a warm worker (one interpreter imports torch / vLLM once and runs many cells)
or, with --isolate-all or a cell's own ``isolate``, in a fresh child; crashes, signals, hangs and
OOM are recorded per cell and the remaining cells move to a fresh worker. Every result is appended
to the journal (JSON lines, fsync'ed); `--resume` continues a journal after a crash or kill -9 of
the prober, re-running only cells that have no row.

Examples:
  probe run --journal run.jsonl --output matrix.json
  probe run --journal run.jsonl --resume -j 2 --gpu-mem-budget 60
  probe run --plan-file cells.json --isolate-all --timeout 120
Exit codes: 0 every cell ran (whatever its outcome), 5 some cells could not be run,
4 the prober's own machinery failed, 2 usage error, 6 unreadable plan / journal, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from probe.cli.plan_args import add_plan_arguments, build_plan_from_args

if TYPE_CHECKING:
    from probe.cells import CellResult, CellSpec
    from probe.run import RunOptions, RunReport


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return v


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return v


def configure_parser(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("run")
    g.add_argument(
        "--journal",
        default="probe-journal.jsonl",
        metavar="PATH",
        help="JSON-lines journal of cell results (default: %(default)s)",
    )
    g.add_argument(
        "--resume", action="store_true", help="continue an existing journal: skip cells it already has"
    )
    g.add_argument(
        "-j", "--jobs", type=_positive_int, default=1, metavar="N", help="cells run at once (default 1)"
    )
    g.add_argument(
        "--gpu-mem-budget",
        type=_positive_float,
        default=None,
        metavar="GiB",
        help="sum of running cells' mem_gib estimates stays within this (default: free GPU memory "
        "from nvidia-smi; unified-memory devices use the host-memory policy instead)",
    )
    g.add_argument(
        "--host-reserve",
        type=_positive_float,
        default=8.0,
        metavar="GiB",
        help="unified memory: memory always left to the host (at least 15%% of RAM; default 8)",
    )
    _add_limit_flags(g)
    g.add_argument(
        "--isolate-all", action="store_true", help="a fresh child per cell (slower, no warm workers)"
    )
    g.add_argument(
        "--confirm-crashes",
        action="store_true",
        help="re-run a cell that crashed a warm worker once in a fresh child and record that result",
    )
    _add_output_flags(g)
    add_plan_arguments(p.add_argument_group("plan"))


def _add_limit_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--timeout",
        type=_positive_float,
        default=None,
        metavar="S",
        help="per-cell time limit in seconds for every cell (default: each cell's own)",
    )
    g.add_argument(
        "--jit-timeout",
        type=_nonneg_float,
        default=1200.0,
        metavar="S",
        help="extra seconds a cell may spend JIT-compiling (nvcc / ninja / ptxas in its process tree, "
        "FlashInfer / Triton / DeepGEMM JIT lines in its output) beyond its own limit; 0: none "
        "(default %(default).0f)",
    )
    g.add_argument(
        "--warm-jit",
        action="store_true",
        help="compile the plan's JIT modules first, in parallel (FlashInfer's CUTLASS MoE module, each "
        "FLASHINFER attention layout); results and JIT cache sizes go to JOURNAL.warm.jsonl",
    )
    g.add_argument(
        "--grace",
        type=_positive_float,
        default=5.0,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL for a cell that timed out (default 5)",
    )


def _add_output_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "-o", "--output", default=None, metavar="MATRIX.json", help="write the matrix here at the end"
    )
    g.add_argument("--image", default=None, metavar="NAME", help="name of the image under test (provenance)")
    g.add_argument(
        "--plan-file",
        default=None,
        metavar="CELLS.json",
        help="run these cells (a JSON list of CellSpec objects) instead of the built-in plan",
    )


def _build_plan(args: argparse.Namespace) -> list[CellSpec]:
    from probe.run import load_plan_file

    if args.plan_file:
        return load_plan_file(args.plan_file)
    return build_plan_from_args(args)


def options_from_args(args: argparse.Namespace, specs: list[CellSpec]) -> RunOptions:
    """The flags of ``probe run`` as typed options (progress lines on stderr)."""
    from probe.run import RunOptions

    return RunOptions(
        cells=tuple(specs),
        journal=args.journal,
        resume=args.resume,
        jobs=args.jobs,
        gpu_mem_budget_gib=args.gpu_mem_budget,
        host_reserve_gib=args.host_reserve,
        timeout_s=args.timeout,
        jit_timeout_s=args.jit_timeout,
        warm_jit=args.warm_jit,
        grace_s=args.grace,
        isolate_all=args.isolate_all,
        confirm_crashes=args.confirm_crashes,
        output=args.output,
        image=args.image,
        progress=_progress,
    )


def _progress(r: CellResult, done: int, todo: int) -> None:
    extra = f"  {r.root_cause[:100]}" if r.root_cause and r.outcome.value != "ok" else ""
    degraded = " (degraded)" if r.degraded else ""
    print(
        f"[{done}/{todo}] {r.id}: {r.outcome.value}{degraded} {r.wall_s:.1f}s{extra}",
        file=sys.stderr,
        flush=True,
    )


def _print_summary(report: RunReport, journal_path: str, output: str | None) -> None:
    print(
        f"{len(report.results)}/{report.planned} cells recorded in {journal_path}: "
        + ", ".join(f"{k} {v}" for k, v in report.tally.items())
    )
    flagged = report.probe_errors
    if flagged:
        print(
            f"{len(flagged)} cell(s) failed inside probe's own code (details.probe_error; most likely "
            f"probe bugs, please report them): {', '.join(flagged[:10])}"
            + (" ..." if len(flagged) > 10 else "")
        )
    if report.matrix is not None:
        print(f"matrix written to {output}")


def execute(args: argparse.Namespace) -> int:
    from probe.errors import EXIT_OK, EXIT_PARTIAL, RunInterrupted
    from probe.run import run_plan

    try:
        report = run_plan(options_from_args(args, _build_plan(args)))
    except RunInterrupted as stopped:
        _print_summary(stopped.report, args.journal, args.output)
        raise KeyboardInterrupt from None  # main() says "interrupted" and exits 130
    _print_summary(report, args.journal, args.output)
    if report.not_run:
        for cid, why in list(report.not_run.items())[:20]:
            print(f"not run: {cid}: {why}", file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_OK
