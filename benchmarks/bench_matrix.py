"""``show`` / ``merge`` / ``diff`` / ``gate`` on a big matrix, as whole processes: wall time and peak RSS.

Usage:
    python3 benchmarks/bench_matrix.py build [--mb 200] [--out DIR]
    python3 benchmarks/bench_matrix.py run [--out DIR] [--repeat 3]

``build`` writes two matrices of about ``--mb`` MB each (the cells of the published H200 matrix,
cycled under new ids, as probe writes them: ~95,000 cells for 200 MB); ``new.json`` has every 97th
passing cell crashed, so ``diff`` and ``gate`` find regressions. ``run`` times each verb
``--repeat`` times, round-robin, and prints the median (range) wall time and the largest peak
RSS of each (``os.wait4``), plus the load average of the machine while it ran. Results also go to
``benchmarks/results/matrix_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(tempfile.gettempdir()) / "probe-bench-matrix"
BASE = ROOT / "matrices" / "measured" / "nvidia-h200-sm90-vllm-0.26.0.json"


def build(out: Path, mb: int) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.hostile.inputs import write_big_matrix

    out.mkdir(parents=True, exist_ok=True)
    for name, flip in (("old.json", 0), ("new.json", 97)):
        n = write_big_matrix(out / name, mb, base=BASE, flip_every=flip)
        print(f"{out / name}: {(out / name).stat().st_size / 1e6:.0f} MB, {n} cells")


def cases(out: Path) -> dict[str, list[str]]:
    old, new = str(out / "old.json"), str(out / "new.json")
    o = str(out / "output")
    return {
        "show (table)": ["show", old, "-o", o],
        "show --format json": ["show", old, "--format", "json", "-o", o],
        "show --format html": ["show", old, "--format", "html", "-o", o],
        "merge old new": ["merge", old, new, "-o", o],
        "diff old new": ["diff", old, new],
        "gate (5 models' recommendations)": ["gate", "--baseline", old, "--current", new],
        "gate --models 122b": ["gate", "--baseline", old, "--current", new, "--models", "122b"],
    }


def timed(args: list[str]) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit code): started with posix_spawn, so the peak is probe's own (a
    forked child counts its parent's pages until it execs)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        actions = [(os.POSIX_SPAWN_DUP2, null.fileno(), 1)]
        pid = os.posix_spawn(
            sys.executable, [sys.executable, "-m", "probe", *args], env, file_actions=actions
        )
        _, status, usage = os.wait4(pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def run(out: Path, repeat: int) -> None:
    results: dict[str, dict[str, object]] = {}
    walls: dict[str, list[float]] = {name: [] for name in cases(out)}
    rss: dict[str, float] = dict.fromkeys(walls, 0.0)
    codes: dict[str, int] = {}
    loads = []
    for _ in range(repeat):
        for name, args in cases(out).items():
            wall, peak, rc = timed(args)
            walls[name].append(wall)
            rss[name] = max(rss[name], peak)
            codes[name] = rc
            loads.append(os.getloadavg()[0])
    for name, w in walls.items():
        results[name] = {
            "median_s": statistics.median(w),
            "min_s": min(w),
            "max_s": max(w),
            "peak_rss_mb": rss[name],
            "exit": codes[name],
        }
        span = f"({min(w):.1f}-{max(w):.1f})"
        print(f"{name:36s} {statistics.median(w):6.1f} s {span}  {rss[name]:5.0f} MB  exit {codes[name]}")
    size = (out / "old.json").stat().st_size / 1e6
    load = f"{min(loads):.1f}-{max(loads):.1f}"
    print(f"matrix: {size:.0f} MB; load average while running: {load} on {os.cpu_count()} CPUs")
    dest = ROOT / "benchmarks" / "results" / "matrix_bench.json"
    dest.write_text(
        json.dumps(
            {"matrix_mb": round(size), "repeat": repeat, "load": [min(loads), max(loads)], "cases": results},
            indent=1,
        )
        + "\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("build", "run"))
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    if a.what == "build":
        build(a.out, a.mb)
    else:
        run(a.out, a.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
