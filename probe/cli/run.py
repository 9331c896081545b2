"""Run the probe plan in sandboxed children, journal every cell, and publish the matrix.

Each cell runs in a warm worker (one interpreter imports torch / vLLM once and runs many cells)
or, with --isolate-all or a cell's own ``isolate``, in a fresh child; crashes, signals, hangs and
OOM are recorded per cell and the remaining cells move to a fresh worker. Every result is appended
to the journal (JSON lines, fsync'ed); `--resume` continues a journal after a crash or kill -9 of
the prober, re-running only cells that have no row.

With --budget the run ends in time: cells run in order of value (the requested models' own shapes, the
recommended pair and its runner-up, vLLM's defaults, then the sweep), the JIT pre-pass compiles beside
the cells that need no compile, and what the budget does not reach is recorded not_run with the reason
(unknown, never a failure). --reuse copies the cells whose inputs did not change from an earlier journal
or matrix (probe version, parameters, GPU, driver, CUDA, package digests: docs/sandbox.md).

Examples:
  probe run --journal run.jsonl --output matrix.json
  probe run --models 122b --budget 10m --journal run.jsonl -o matrix.json
  probe run --models 122b --budget 15m --dry-run                      # the order, estimates, JIT, the cut
  probe run --budget 15m --reuse last-matrix.json --estimates last.jsonl -o matrix.json
  probe run --journal run.jsonl --resume -j 2 --gpu-mem-budget 60
  probe run --plan-file cells.json --isolate-all --timeout 120
Exit codes: 0 every planned cell has a row (measured, reused, or not_run with its reason), 5 some cells
could not be run, 4 the prober's own machinery failed, 2 usage error, 6 unreadable plan / journal /
estimates / baseline, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from probe.cli.plan_args import add_plan_arguments, build_plan_from_args
from probe.cli.run_report import Printer

if TYPE_CHECKING:
    from probe.cells import CellSpec
    from probe.run import RunOptions


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
    _add_budget_flags(p.add_argument_group("budget and reuse"))
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
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compile the plan's JIT modules in a pre-pass beside the cells (FlashInfer's CUTLASS MoE "
        "module, each JIT-compiling attention layout): only the cells that need a module wait for it, "
        "each module may compile for --jit-timeout s; results in JOURNAL.warm.jsonl (default: on with "
        "--budget, else off)",
    )
    g.add_argument(
        "--grace",
        type=_positive_float,
        default=5.0,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL for a cell that timed out (default 5)",
    )


#: the shortest budget that holds a cell: the import cell takes ~15 s and a warm worker ~25 s to start
MIN_BUDGET_S = 60.0


def _duration(text: str) -> float:
    from probe.cli.run_report import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _check_budget(args: argparse.Namespace) -> None:
    """A budget too short for any cell of the built-in plan is a usage error, not a run of nothing (a
    --plan-file's cells may be quicker: its own estimates decide)."""
    from probe.errors import OptionError

    if args.budget is not None and args.budget < MIN_BUDGET_S and not args.plan_file:
        raise OptionError(
            "budget",
            f"{args.budget:.0f} s fits nothing: the import cell alone takes ~15 s and each warm worker ~25 s "
            "to start",
            hint="give at least 1m (3m measures a model's MoE and attention halves, 10m adds its engines)",
        )


def _add_budget_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--budget",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="the whole run ends within this (15m, 900, 900s, 1h): cells in order of value; what does not "
        "fit is recorded not_run with the reason",
    )
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan in run order with per-cell estimates, which cells JIT-compile, what is "
        "reused, and where the budget ends; run nothing",
    )
    g.add_argument(
        "--estimates",
        nargs="+",
        default=(),
        metavar="JOURNAL",
        help="journals (or matrices) of earlier runs: per-cell time estimates (median wall time of the "
        "same cell, else of its kind and backend; default: by kind)",
    )
    g.add_argument(
        "--reuse",
        default=None,
        metavar="BASELINE",
        help="a journal or matrix of an earlier run: copy each cell whose inputs did not change (probe "
        "version, parameters, GPU, driver, CUDA, digests of the packages it runs on); run the rest",
    )
    g.add_argument(
        "--python",
        default=None,
        metavar="PY",
        help="the interpreter the cells run in and whose installed packages are digested (default: this one)",
    )
    g.add_argument(
        "--heartbeat",
        type=_nonneg_float,
        default=30.0,
        metavar="S",
        help="a progress line for each cell (or compile) running this long, and again every S s; 0: off",
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
    from probe.run.planning import load_plan_file

    if args.plan_file:
        return load_plan_file(args.plan_file)
    return build_plan_from_args(args)


def options_from_args(args: argparse.Namespace, specs: list[CellSpec], printer: Printer) -> RunOptions:
    """The flags of ``probe run`` as typed options (progress lines on stderr)."""
    from probe.cli.run_report import priorities
    from probe.matrix.build import nvidia_smi
    from probe.run import RunOptions

    models = [m.strip() for m in (args.models or "").split(",") if m.strip()]
    warm = args.warm_jit if args.warm_jit is not None else args.budget is not None
    return RunOptions(
        cells=tuple(specs),
        journal=args.journal,
        resume=args.resume,
        jobs=args.jobs,
        gpu_mem_budget_gib=args.gpu_mem_budget,
        host_reserve_gib=args.host_reserve,
        timeout_s=args.timeout,
        jit_timeout_s=args.jit_timeout,
        warm_jit=warm,
        grace_s=args.grace,
        isolate_all=args.isolate_all,
        confirm_crashes=args.confirm_crashes,
        output=args.output,
        image=args.image,
        progress=printer.result,
        budget_s=args.budget,
        budget_from=printer.started,
        # the value order matters when the budget will not fit everything (and for --dry-run's listing)
        priorities=priorities(models, nvidia_smi().get("cc")) if args.budget or args.dry_run else None,
        estimates=tuple(args.estimates or ()),
        reuse=args.reuse,
        python=args.python,
        heartbeat_s=args.heartbeat,
        heartbeat=printer.heartbeat,
        on_plan=lambda plan: printer.plan(plan, args.budget, args.jobs),
    )


def execute(args: argparse.Namespace) -> int:
    import time

    from probe.cli.run_report import Printer, summary
    from probe.errors import EXIT_OK, EXIT_PARTIAL
    from probe.run import RunInterrupted, prepare, run_plan

    _check_budget(args)
    if args.output:  # a FIFO, device or folder is refused before the run, not after it
        from probe.cli.flags import output_file

        output_file(args.output, "-o")
    printer = Printer(args.budget, time.monotonic())
    opts = options_from_args(args, _build_plan(args), printer)
    if args.dry_run:
        from probe.run.planning import render

        render(prepare(opts), args.budget, args.jobs)
        return EXIT_OK
    try:
        report = run_plan(opts)
    except RunInterrupted as stopped:
        summary(stopped.report, args.journal, args.output)
        raise KeyboardInterrupt from None  # main() says "interrupted" and exits 130
    summary(report, args.journal, args.output)
    if report.not_run:
        for cid, why in list(report.not_run.items())[:20]:
            print(f"not run: {cid}: {why}", file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_OK
