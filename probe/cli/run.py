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
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from probe.cli.plan_args import add_plan_arguments, build_plan_from_args

if TYPE_CHECKING:
    from probe.cells import CellResult, CellSpec
    from probe.sandbox.journal import Journal
    from probe.sandbox.memory import MemoryPolicy

log = logging.getLogger(__name__)


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
    g.add_argument(
        "--isolate-all", action="store_true", help="a fresh child per cell (slower, no warm workers)"
    )
    g.add_argument(
        "--confirm-crashes",
        action="store_true",
        help="re-run a cell that crashed a warm worker once in a fresh child and record that result",
    )
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
    add_plan_arguments(p.add_argument_group("plan"))


def _load_plan_file(path: str) -> list[CellSpec]:
    import json

    from pydantic import ValidationError

    from probe.cells import CellSpec
    from probe.errors import BadInputError

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise BadInputError(f"no such plan file: {path}")
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInputError(f"cannot read plan file {path}: {exc}")
    cells = data.get("cells") if isinstance(data, dict) else data
    if not isinstance(cells, list):
        raise BadInputError(f'plan file {path} must hold a JSON list of cells (or {{"cells": [...]}})')
    try:
        return [CellSpec.model_validate(c) for c in cells]
    except ValidationError as exc:
        raise BadInputError(f"plan file {path} has an invalid cell: {exc}")


def _build_plan(args: argparse.Namespace) -> list[CellSpec]:
    if args.plan_file:
        return _load_plan_file(args.plan_file)
    return build_plan_from_args(args)


def _memory_policy(args: argparse.Namespace) -> tuple[MemoryPolicy, dict[str, Any]]:
    from dataclasses import asdict

    from probe.sandbox.memory import MemoryPolicy, detect_device_memory

    dev = detect_device_memory()
    if dev.unified:
        policy = MemoryPolicy(unified=True, reserve_gib=args.host_reserve)
    else:
        policy = MemoryPolicy(
            budget_gib=args.gpu_mem_budget if args.gpu_mem_budget else dev.free_gib,
            reserve_gib=args.host_reserve,
        )
    return policy, {k: v for k, v in asdict(dev).items() if v is not None}


def _open_journal(
    args: argparse.Namespace, specs: list[CellSpec], device: dict[str, Any]
) -> tuple[Journal, str]:
    """The journal (new, or resumed) and the run id its cells' processes carry."""
    import platform
    import uuid

    from probe.errors import InfraError
    from probe.sandbox import procs
    from probe.sandbox.journal import Journal, plan_hash

    run_meta = {
        "run_id": uuid.uuid4().hex[:12],
        "plan_hash": plan_hash(specs),
        "image": args.image,
        "host": platform.node(),
        "device": device,
        "cells": len(specs),
    }
    try:
        journal = Journal.open(args.journal, resume=args.resume, run_meta=run_meta)
    except OSError as exc:
        raise InfraError(f"cannot write the journal {args.journal}: {exc}") from exc
    run_id = journal.run_id or str(run_meta["run_id"])
    if args.resume:
        left = procs.kill_strays(f"{run_id}-", prefix=True)
        if left:
            log.warning("killed %d process(es) left over from the interrupted run %s", len(left), run_id)
    return journal, run_id


def _progress(todo: int) -> Callable[[CellResult], None]:
    count = [0]

    def progress(r: CellResult) -> None:
        count[0] += 1
        extra = f"  {r.root_cause[:100]}" if r.root_cause and r.outcome.value != "ok" else ""
        print(
            f"[{count[0]}/{todo}] {r.id}: {r.outcome.value}{' (degraded)' if r.degraded else ''} "
            f"{r.wall_s:.1f}s{extra}",
            file=sys.stderr,
            flush=True,
        )

    return progress


def _print_summary(results: list[CellResult], planned: int, journal_path: str) -> None:
    from collections import Counter

    tally = Counter(r.outcome.value for r in results)
    print(
        f"{len(results)}/{planned} cells recorded in {journal_path}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
    )
    flagged = [r.id for r in results if r.details.get("probe_error")]
    if flagged:
        print(
            f"{len(flagged)} cell(s) failed inside probe's own code (details.probe_error; most likely "
            f"probe bugs, please report them): {', '.join(flagged[:10])}"
            + (" ..." if len(flagged) > 10 else "")
        )


def execute(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from probe.errors import EXIT_OK, EXIT_PARTIAL, InfraError, UsageError
    from probe.sandbox.journal import plan_hash
    from probe.sandbox.runner import RunnerConfig, raise_nofile_limit, run_cells

    specs = _build_plan(args)
    if not specs:
        raise UsageError("the plan is empty: nothing to run")
    policy, device = _memory_policy(args)
    journal, run_id = _open_journal(args, specs, device)
    raise_nofile_limit()
    cfg = RunnerConfig(
        jobs=args.jobs,
        grace_s=args.grace,
        timeout_override_s=args.timeout,
        isolate_all=args.isolate_all,
        confirm_crashes=args.confirm_crashes,
        memory=policy,
        run_id=run_id,
        jit_timeout_s=args.jit_timeout,
    )
    progress = _progress(sum(1 for s in specs if s.id not in journal.done_ids))
    started = journal.header.get("started_at") or datetime.now(timezone.utc).isoformat(timespec="seconds")
    note = f"probe run {run_id}; plan {plan_hash(specs)}; journal {args.journal}; started {started}"
    try:
        with _sigterm_as_interrupt():
            if args.warm_jit:
                _warm_jit(args, specs, cfg)
            report = run_cells(specs, cfg, journal=journal, on_result=progress)
    except OSError as exc:
        journal.close()
        raise InfraError(f"the runner failed: {exc}") from exc
    except KeyboardInterrupt:
        _finish(args, journal, specs, note + "; interrupted")
        raise
    _finish(args, journal, specs, note)
    if report.not_run:
        for cid, why in list(report.not_run.items())[:20]:
            print(f"not run: {cid}: {why}", file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_OK


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``timeout``, a CI job's cancel, a batch system) stops the run as Ctrl-C does: the cells in
    flight are killed and left un-journaled (a resume re-runs them), never recorded as crashes."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _finish(args: argparse.Namespace, journal: Journal, specs: list[CellSpec], note: str) -> None:
    """Close the journal, print the summary and write the matrix of what was measured (also after an
    interrupt: the matrix then says ``partial``)."""
    journal.close()
    plan_ids = {s.id for s in specs}
    results = [r for r in journal.results if r.id in plan_ids]
    _print_summary(results, len(specs), args.journal)
    if args.output:
        _write_matrix(args, results, len(specs), note=note)


def _warm_jit(args: argparse.Namespace, specs: list[CellSpec], cfg: Any) -> None:
    """The JIT pre-pass (``probe.probes.jit_warm``): its cells run isolated, all at once, in a journal of
    their own (they are not matrix cells); a failed build is recorded there and the run goes on."""
    from dataclasses import replace

    from probe.probes.jit_warm import warm_specs
    from probe.sandbox.journal import Journal
    from probe.sandbox.runner import run_cells

    warm = warm_specs(specs)
    if not warm:
        return
    journal = Journal.open(f"{args.journal}.warm.jsonl", resume=True, run_meta={"run_id": f"{cfg.run_id}w"})
    try:
        jobs = min(len(warm), os.cpu_count() or 1)  # each compiles on its own core(s)
        run_cells(warm, replace(cfg, jobs=jobs, run_id=f"{cfg.run_id}w"), journal=journal,
                  on_result=_progress(len(warm)))  # fmt: skip
    finally:
        journal.close()


def _write_matrix(args: argparse.Namespace, results: list[CellResult], planned: int, note: str) -> None:
    from probe.matrix.build import build_matrix, collect_provenance, write_matrix

    provenance = collect_provenance(args.image)
    provenance["note"] = note
    matrix = build_matrix(results, provenance=provenance, static=None, cells_planned=planned)
    write_matrix(matrix, args.output)
    print(f"matrix written to {args.output}")
