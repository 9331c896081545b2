"""`probe classify` on a huge log, next to `grep` on the same file (wall time and peak RSS per process).

Usage:  python3 benchmarks/bench_classify.py [--size-mb 1024] [--runs 3] [--keep PATH]

Generates a log of about --size-mb MB of vLLM engine-stats lines with the root cause (an illegal memory
access) on the last line, then times, as whole processes (median of --runs):

- `grep -c 'illegal memory access' LOG` (the reference: reads every byte);
- `probe classify LOG --json` (a regular file: the first 256 KiB and the last 1 MiB are read, the middle
  is skipped by seeking);
- `probe classify - --json < LOG` (stdin is the file: same as above);
- `cat LOG | probe classify - --json` (a pipe: read through, first 256 KiB + a rolling last 1 MiB, up to
  1 GiB, then reading stops).

and, for scale, `probe classify` of a one-line log (the interpreter and import start-up alone).
Each probe run must answer `device_fault` with the last line as root cause (checked). Target: near
grep's time on a 1 GB log.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = (
    b"(EngineCore_DP0 pid=77) INFO 05-10 12:00:01 [loggers.py:123] Engine 000: Avg prompt throughput: "
    b"10.0 tokens/s, Avg generation throughput: 50.0 tokens/s, Running: 0 reqs\n"
)
CAUSE = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"


def make_log(path: Path, size_mb: int) -> None:
    block = LINE * ((1 << 20) // len(LINE))
    with open(path, "wb") as f:
        written = 0
        while written < size_mb * 1_000_000:
            f.write(block)
            written += len(block)
        f.write(CAUSE)


def run(cmd: str, env: dict[str, str]) -> tuple[float, int, bytes]:
    """(wall seconds, peak RSS in MiB of the process tree's largest member, stdout) of a shell command."""
    t0 = time.perf_counter()
    p = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE, env=env, cwd=ROOT)
    out = p.stdout.read() if p.stdout else b""
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{cmd!r} exited {p.returncode}")
    return wall, usage.ru_maxrss // 1024, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", default=None, help="write the log here and keep it (default: a temp file)")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    tmp = tempfile.TemporaryDirectory(prefix="probe-bench-classify-")
    log = Path(args.keep) if args.keep else Path(tmp.name) / "big.log"
    if not log.exists():
        make_log(log, args.size_mb)
    size = log.stat().st_size
    py = sys.executable
    tiny = Path(tmp.name) / "tiny.log"
    tiny.write_bytes(CAUSE)
    cases = {
        "grep -c (reference)": f"grep -c 'illegal memory access' {log}",
        "probe classify of a 1-line log (start-up)": f"{py} -m probe classify {tiny} --json",
        "probe classify FILE": f"{py} -m probe classify {log} --json",
        "probe classify - < FILE": f"{py} -m probe classify - --json < {log}",
        "cat FILE | probe classify -": f"cat {log} | {py} -m probe classify - --json",
    }
    print(f"log: {size / 1e9:.2f} GB, {size // len(LINE):,} lines, cause on the last line")
    for name, cmd in cases.items():
        walls, rss = [], []
        for _ in range(args.runs):
            wall, peak, out = run(cmd, env)
            walls.append(wall)
            rss.append(peak)
            if name.startswith("probe"):
                v = json.loads(out)
                assert v["outcome"] == "device_fault" and "illegal memory access" in v["root_cause"], v
        med = statistics.median(walls)
        print(
            f"{name:42s} median {med:6.2f} s  (min {min(walls):.2f}, max {max(walls):.2f})"
            f"  peak RSS {max(rss)} MiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
