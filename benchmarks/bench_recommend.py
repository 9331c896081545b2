"""Start-up time of `probe recommend` as a whole process (hyperfine-like: warm-up, N runs, median).

Usage:  python3 benchmarks/bench_recommend.py [--runs 21] [--matrix tests/matrix/data/baseline.json]
                                             [--no-evidence-cache] [--no-bytecode-cache]
Prints the median / min / max wall time of `python3 -m probe recommend --model 122b ...` and, for
reference, of a bare `python3 -c pass` on the same machine. Target: <= 0.2 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], runs: int, env: dict[str, str], warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True, env=env)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True, env=env)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--matrix", default="tests/matrix/data/baseline.json")
    ap.add_argument("--model", default="122b")
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE as is (every run recompiles probe's sources); by default "
        "the runs use a temporary PYTHONPYCACHEPREFIX, as an installed package has .pyc files",
    )
    ap.add_argument(
        "--no-evidence-cache",
        action="store_true",
        help="PROBE_EVIDENCE_CACHE=0: every run parses the evidence files (by default the runs share a "
        "temporary cache folder, which the warm-up runs fill)",
    )
    args = ap.parse_args()
    env = dict(os.environ)
    cache = tempfile.TemporaryDirectory(prefix="probe-bench-pyc-")
    probe_cache = tempfile.TemporaryDirectory(prefix="probe-bench-cache-")
    env["PROBE_CACHE_DIR"] = probe_cache.name
    if args.no_evidence_cache:
        env["PROBE_EVIDENCE_CACHE"] = "0"
    if not args.no_bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache.name
    model = args.model

    def probe(*extra: str) -> list[str]:
        return [sys.executable, "-m", "probe", "recommend", "--model", model, *extra]

    cases = {
        "python3 -c pass": [sys.executable, "-c", "pass"],
        f"probe recommend --model {args.model} --matrix {args.matrix}": probe("--matrix", args.matrix),
        "the recommend verb alone (no other verb's parser built)": [
            sys.executable,
            "-c",
            "import argparse, sys; from probe.cli import recommend as r; p = argparse.ArgumentParser(); "
            f"r.configure_parser(p); sys.exit(r.execute(p.parse_args(['--model', '{args.model}', "
            f"'--matrix', '{args.matrix}'])))",
        ],
        f"probe recommend --model {args.model} (default matrices/: the measured H200 answers)": probe(),
        f"probe recommend --model {args.model} --json (default matrices/, --gpu sm_110a)": probe(
            "--gpu", "sm_110a", "--json"
        ),
        f"probe recommend --model {args.model} --gpu sm_120 (matrices/: oracle + scan + reports)": probe(
            "--gpu", "sm_120"
        ),
        "probe recommend --model 120b --gpu sm_89 (default matrices/: oracle + scan)": [
            *probe("--gpu", "sm_89")[:-4],
            "--model",
            "120b",
            "--gpu",
            "sm_89",
        ],
    }
    for name, cmd in cases.items():
        t = timed(cmd, args.runs, env)
        print(
            f"{name}\n    median {statistics.median(t) * 1000:.0f} ms   min {min(t) * 1000:.0f} ms   "
            f"max {max(t) * 1000:.0f} ms   ({args.runs} runs)"
        )
    cache.cleanup()
    probe_cache.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
