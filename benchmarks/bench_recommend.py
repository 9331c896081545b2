"""Start-up time of `probe recommend` as a whole process (hyperfine-like: warm-up, N runs, median).

Usage:  python3 benchmarks/bench_recommend.py [--runs 21] [--matrix tests/matrix/data/baseline.json]
                                             [--no-evidence-cache] [--no-bytecode-cache] [--installed]
Prints the median / min / max wall time of `python3 -m probe recommend --model 122b ...` and, for
reference, of a bare `python3 -c pass` on the same machine. Target: <= 0.2 s.

--installed: time probe as a user runs it: `pip install --no-deps .` (not editable, bytecode compiled
by pip) into a fresh virtual environment in a temporary folder, then its `probe` script and its
`python -c pass`. The checkout's own interpreter also pays for whatever `.pth` files its
site-packages holds (an editable install's finder, a sandbox's certificate hook): on a development
machine that is 40-50 ms of every run that is not probe's.
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


def timed(cmd: list[str], runs: int, env: dict[str, str], cwd: Path, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        subprocess.run(cmd, cwd=cwd, capture_output=True, check=True, env=env)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, capture_output=True, check=True, env=env)
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
    ap.add_argument(
        "--installed",
        action="store_true",
        help="install the checkout into a fresh venv (pip install --no-deps .; needs setuptools>=68 "
        "from the package index) and time that copy",
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
    venv = tempfile.TemporaryDirectory(prefix="probe-bench-venv-")
    python = installed_python(Path(venv.name)) if args.installed else sys.executable
    cwd = Path(venv.name) if args.installed else ROOT  # (`-m probe` in the checkout imports the checkout)
    matrix = str((ROOT / args.matrix).resolve())
    if args.installed:
        env.pop("PYTHONPYCACHEPREFIX", None)  # pip compiled the installed copy's bytecode

    def probe(*extra: str) -> list[str]:
        return [python, "-m", "probe", "recommend", "--model", model, *extra]

    cases = {
        "python3 -c pass": [python, "-c", "pass"],
        f"probe recommend --model {args.model} --matrix {args.matrix}": probe("--matrix", matrix),
        "the recommend verb alone (no other verb's parser built)": [
            python,
            "-c",
            "import argparse, sys; from probe.cli import recommend as r; p = argparse.ArgumentParser(); "
            f"r.configure_parser(p); sys.exit(r.execute(p.parse_args(['--model', '{args.model}', "
            f"'--matrix', '{matrix}'])))",
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
        t = timed(cmd, args.runs, env, cwd)
        print(
            f"{name}\n    median {statistics.median(t) * 1000:.0f} ms   min {min(t) * 1000:.0f} ms   "
            f"max {max(t) * 1000:.0f} ms   ({args.runs} runs)"
        )
    cache.cleanup()
    probe_cache.cleanup()
    venv.cleanup()
    return 0


def installed_python(folder: Path) -> str:
    """A fresh venv in ``folder`` with the checkout installed (not editable); its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", str(ROOT)]
    subprocess.run(pip, check=True, cwd=folder)
    return python


if __name__ == "__main__":
    raise SystemExit(main())
