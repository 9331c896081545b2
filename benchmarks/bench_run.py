#!/usr/bin/env python3
"""Benchmark `probe run`'s kernel-level MoE matrix: warm worker vs one fresh process per cell.

Runs on a machine with a GPU and vLLM (the numbers in docs/probes.md come from the lent H100/H200):

    python3 benchmarks/bench_run.py --out OUT [plan flags, e.g. --kinds moe --tp 1 --models 122b]
        [-j N] [--fresh-caches] [--subset 24] [--skip-full]

1. full: every planned cell through the sandbox runner with warm workers, ``-j N`` at once (wall time,
   outcome counts, the slowest cells); ``--fresh-caches`` points vLLM's, Triton's and DeepGEMM's JIT
   caches at an empty directory first, so the figure is a cold run even on a machine that probed before;
2. side by side on the same N cells (spread evenly over the plan, one at a time): warm workers vs
   ``isolate_all`` (a fresh child per cell) — the speed-up is the ratio of the two wall times.
Every run goes through :func:`probe.run.run_plan` (as ``probe run`` does). Writes the journals
OUT/bench_full.jsonl (or ``--journal``), OUT/bench_subset_{warm,isolated}.jsonl and OUT/bench_summary.json
(the figures), and prints the summary.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from probe.cell_params import CellKind
from probe.cells import CellResult, CellSpec
from probe.cli.plan_args import add_plan_arguments, build_plan_from_args
from probe.run import RunOptions, run_plan


def _run(
    specs: list[CellSpec], isolate: bool, out: Path, label: str, journal: Path | None = None, jobs: int = 1
) -> dict[str, Any]:
    """Run ``specs`` (warm workers, or a fresh child per cell) into a journal; the figures of that run.
    A given ``journal`` is resumed (its cells are not run again); the default one is started afresh."""
    path = journal or out / f"{label}.jsonl"
    if journal is None:
        path.unlink(missing_ok=True)

    def progress(r: CellResult, done: int, todo: int) -> None:
        print(f"  [{label}] {r.id}: {r.outcome.value} {r.wall_s:.2f}s", file=sys.stderr, flush=True)

    opts = RunOptions(cells=tuple(specs), journal=path, resume=journal is not None, jobs=jobs,
                      isolate_all=isolate, progress=progress)  # fmt: skip
    t0 = time.perf_counter()
    report = run_plan(opts)
    wall = time.perf_counter() - t0
    ran = report.ran
    counts = collections.Counter(r.outcome.value for r in ran)
    slow = sorted(ran, key=lambda r: -r.wall_s)[:10]
    return {
        "cells": len(specs),
        "jobs": jobs,
        "wall_s": round(wall, 2),
        "cell_seconds": round(sum(r.wall_s for r in ran), 1),
        "slowest": [[r.id, r.outcome.value, r.wall_s] for r in slow],
        "per_cell_s": round(wall / max(1, len(specs)), 3),
        "outcomes": dict(counts),
        "not_run": len(report.not_run),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_plan_arguments(ap)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("-j", "--jobs", type=int, default=1, help="cells at once in the full run (default 1)")
    ap.add_argument("--fresh-caches", action="store_true", help="empty JIT caches (vLLM, Triton, DeepGEMM)")
    ap.add_argument("--subset", type=int, default=24, help="cells compared warm vs isolated (default 24)")
    ap.add_argument("--skip-full", action="store_true", help="only the side-by-side subset")
    ap.add_argument("--skip-subset", action="store_true", help="only the full warm run")
    ap.add_argument(
        "--journal",
        type=Path,
        default=None,
        help="journal of the full run (default OUT/bench_full.jsonl); an existing one is resumed, and a "
        "later `probe run --resume --journal PATH` skips these cells",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.fresh_caches:
        root = tempfile.mkdtemp(prefix="probe-bench-caches-")
        os.environ["VLLM_CACHE_ROOT"] = root
        os.environ["TRITON_CACHE_DIR"] = str(Path(root) / "triton")
        os.environ["DG_JIT_CACHE_DIR"] = str(Path(root) / "deep_gemm")
    specs = [s for s in build_plan_from_args(args) if s.kind is CellKind.MOE]
    summary: dict[str, Any] = {"command": " ".join(sys.argv), "planned_moe_cells": len(specs)}
    prev = args.out / "bench_summary.json"
    if args.skip_full and prev.is_file():  # a full run measured by an earlier call: keep its figures
        old = json.loads(prev.read_text())
        summary.update({k: v for k, v in old.items() if k in ("full_warm", "planned_moe_cells")})
        summary["full_command"] = old.get("command")
    if not args.skip_full:
        summary["full_warm"] = _run(
            specs, False, args.out, "bench_full", journal=args.journal, jobs=args.jobs
        )
        summary["fresh_caches"] = args.fresh_caches
    if args.skip_subset:
        (args.out / "bench_summary.json").write_text(json.dumps(summary, indent=2))
        print(json.dumps(summary, indent=2))
        return 0
    n = min(args.subset, len(specs))
    step = max(1, len(specs) // max(1, n))
    subset = specs[::step][:n]
    summary["subset_ids"] = [s.id for s in subset]
    summary["subset_warm"] = _run(subset, False, args.out, "bench_subset_warm")
    summary["subset_isolated"] = _run(subset, True, args.out, "bench_subset_isolated")
    w, i = summary["subset_warm"]["wall_s"], summary["subset_isolated"]["wall_s"]
    summary["speedup_isolated_over_warm"] = round(i / w, 2) if w else None
    if "full_warm" in summary:
        cells = summary["planned_moe_cells"]
        summary["full_isolated_extrapolated_s"] = round(summary["subset_isolated"]["per_cell_s"] * cells, 1)
        summary["speedup_full_extrapolated"] = round(
            summary["full_isolated_extrapolated_s"] / max(summary["full_warm"]["wall_s"], 1e-9), 2
        )
    (args.out / "bench_summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "subset_ids"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
