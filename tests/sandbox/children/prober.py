"""A minimal prober for the resume test: runs a fixed plan into a journal (resuming it)."""

from __future__ import annotations

import sys

from probe.cells import CellSpec
from probe.sandbox.journal import Journal, plan_hash
from probe.sandbox.runner import RunnerConfig, run_cells


def plan(n: int) -> list[CellSpec]:
    specs = []
    for i in range(n):
        isolate = i % 5 == 4
        target = (
            "tests.sandbox.children.misbehave:segfault"
            if i % 7 == 3
            else "tests.sandbox.children.misbehave:sleepy"
        )
        specs.append(
            CellSpec(
                id=f"cell-{i:03d}",
                kind="fixture",
                target=target,
                params={"s": 0.1 + (i % 4) * 0.05},
                isolate=isolate,
                timeout_s=60,
            )
        )
    return specs


def main() -> int:
    path, n = sys.argv[1], int(sys.argv[2])
    specs = plan(n)
    j = Journal.open(path, resume=True, run_meta={"plan_hash": plan_hash(specs), "run_id": sys.argv[3]})
    cfg = RunnerConfig(
        run_id=j.run_id or sys.argv[3], jobs=int(sys.argv[4]) if len(sys.argv) > 4 else 1, grace_s=1.0
    )
    run_cells(specs, cfg, journal=j)
    j.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
