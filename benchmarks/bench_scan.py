"""``probe scan`` vs cuobjdump on real PyPI wheels, side by side in one run (run by hand).

    python benchmarks/bench_scan.py                 # all three cases, prints a table
    python benchmarks/bench_scan.py --cases torch --repeat 3 --profile

Cases (the issue's performance targets):
  torch  libtorch_cuda.so of torch 2.14.1+cu130: `probe scan` vs `cuobjdump --list-elf`
         (target: >= 50x faster, <= 1/40 of the peak memory)
  cubin  the flashinfer-cubin 0.6.13 tree (15,970 cubins): `probe scan` of the folder vs a
         `cuobjdump --list-elf` loop over every cubin (target: probe <= 2 s)
  vllm   vllm 0.33.0: `probe scan` of the .whl (members read from the zip) vs cuobjdump
         --list-elf + --list-ptx on each unpacked .so (target: >= 20x faster)

Every measurement runs in a fresh child process, through a small wrapper process that reports the
child's wall time and peak RSS (resource.getrusage(RUSAGE_CHILDREN).ru_maxrss), so one tool's
memory never leaks into another's figure. probe runs with --no-cache (a cold scan: no result
cache); the page cache is warmed by one untimed run of each tool first. Wheels are downloaded once
and cached under ~/.cache/probe-tests (tests/arch/wheels.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.arch import wheels  # noqa: E402

_WRAPPER = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
n = 0
for line in sys.stdin:
    cmd = json.loads(line)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    n += 1
wall = time.perf_counter() - t
print(json.dumps({"seconds": wall, "peak_rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "commands": n, "last_rc": r.returncode}))
"""


def measure(cmds: list[list[str]]) -> dict[str, float]:
    """Run ``cmds`` one after the other in a fresh wrapper process: total wall time, peak RSS."""
    payload = "".join(json.dumps(c) + "\n" for c in cmds)
    out = subprocess.run(
        [sys.executable, "-c", _WRAPPER], input=payload, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def repeat(cmds: list[list[str]], n: int) -> dict[str, float]:
    runs = [measure(cmds) for _ in range(n)]
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "peak_rss_kb": max(r["peak_rss_kb"] for r in runs),
        "runs": n,
        "commands": runs[0]["commands"],
        "last_rc": runs[0]["last_rc"],
    }


PROBE_ARGS = ["--all-targets"]


def probe_cmd(*paths: str | Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "probe",
        "scan",
        "--no-cache",
        *PROBE_ARGS,
        "--json",
        "--output",
        os.devnull,
        *map(str, paths),
    ]


def libtorch_cuda() -> Path:
    whl = wheels.wheel("torch")
    dest = wheels.UNPACKED / whl.stem
    so = dest / "torch" / "lib" / "libtorch_cuda.so"
    if not so.exists():
        with zipfile.ZipFile(whl) as zf:
            zf.extract("torch/lib/libtorch_cuda.so", dest)
    return so


def case_torch(tool: str, n: int) -> dict[str, object]:
    so = libtorch_cuda()
    measure([probe_cmd(so)])
    measure([[tool, "--list-elf", str(so)]])
    probe = repeat([probe_cmd(so)], n)
    cuo = repeat([[tool, "--list-elf", str(so)]], n)
    return {
        "case": "torch",
        "input": f"{so.name} ({so.stat().st_size / 2**20:.0f} MiB, torch 2.14.1+cu130)",
        "probe_cmd": f"probe scan --no-cache {' '.join(PROBE_ARGS)} --json <libtorch_cuda.so>",
        "cuobjdump_cmd": "cuobjdump --list-elf <libtorch_cuda.so>",
        "probe": probe,
        "cuobjdump": cuo,
        "target": "speed >= 50x, memory <= 1/40",
    }


def case_cubin(tool: str, n: int, sample: int | None) -> dict[str, object]:
    tree = wheels.unpacked(wheels.wheel("flashinfer-cubin"))
    cubins = sorted(str(p) for p in tree.rglob("*.cubin"))
    measure([probe_cmd(tree)])
    probe = repeat([probe_cmd(tree)], n)
    todo = cubins if not sample else cubins[:: max(1, len(cubins) // sample)]
    cuo = measure([[tool, "--list-elf", c] for c in todo])
    note = "full loop"
    if len(todo) != len(cubins):
        cuo["seconds"] *= len(cubins) / len(todo)
        note = f"extrapolated from {len(todo)} of {len(cubins)} cubins"
    cuo.update(runs=1, note=note)
    return {
        "case": "cubin",
        "input": f"flashinfer-cubin 0.6.13 tree ({len(cubins)} cubins)",
        "probe_cmd": f"probe scan --no-cache {' '.join(PROBE_ARGS)} --json <tree>",
        "cuobjdump_cmd": "for f in <tree>/**/*.cubin: cuobjdump --list-elf f",
        "probe": probe,
        "cuobjdump": cuo,
        "target": "probe <= 2 s",
    }


def inflate_floor(whl: Path, n: int) -> dict[str, float]:
    """The lower bound for any reader that does not unpack: inflate every ``.so`` member once
    (same inflater and thread count as probe, nothing else), median of ``n``."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from probe.arch.inflate import inflater
    from probe.arch.wheel import WHEEL_THREADS, data_offset

    name, mod = inflater()
    with zipfile.ZipFile(whl) as zf:
        members = sorted((i for i in zf.infolist() if i.filename.endswith(".so")), key=lambda i: -i.file_size)
    fd = os.open(whl, os.O_RDONLY)

    def one(info: zipfile.ZipInfo) -> int:
        d = mod.decompressobj(-15)
        pos = data_offset(fd, info)
        end = pos + info.compress_size
        out = 0
        while pos < end:
            data = os.pread(fd, min(512 << 10, end - pos), pos)
            pos += len(data)
            out += len(d.decompress(data))
        return out

    runs, biggest = [], []
    try:
        for _ in range(n):
            t = time.perf_counter()
            with ThreadPoolExecutor(WHEEL_THREADS) as pool:
                total = sum(pool.map(one, members))
            runs.append(time.perf_counter() - t)
            t = time.perf_counter()
            one(members[0])
            biggest.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    return {
        "inflater": name,
        "threads": WHEEL_THREADS,
        "bytes": total,
        "seconds": statistics.median(runs),
        "biggest_member": members[0].filename,
        "biggest_bytes": members[0].file_size,
        "biggest_seconds": statistics.median(biggest),
    }


def case_vllm(tool: str, n: int) -> dict[str, object]:
    whl = wheels.wheel("vllm")
    root = wheels.unpacked(whl, ".so")
    sos = sorted(str(p) for p in root.rglob("*.so"))
    cuo_cmds = [[tool, flag, s] for s in sos for flag in ("--list-elf", "--list-ptx")]
    measure([probe_cmd(whl)])
    measure(cuo_cmds)
    probe = repeat([probe_cmd(whl)], n)
    cuo = repeat(cuo_cmds, n)
    floor = inflate_floor(whl, n)
    return {
        "case": "vllm",
        "inflate_floor": floor,
        "input": f"{whl.name} ({len(sos)} .so files)",
        "probe_cmd": f"probe scan --no-cache {' '.join(PROBE_ARGS)} --json <vllm .whl>",
        "cuobjdump_cmd": "cuobjdump --list-elf and --list-ptx on each unpacked .so",
        "probe": probe,
        "cuobjdump": cuo,
        "target": "speed >= 20x",
    }


def profile(paths: list[str]) -> str:
    import cProfile
    import io
    import pstats

    from probe.arch.scanner import scan_paths

    pr = cProfile.Profile()
    pr.enable()
    scan_paths(paths, kernels=False, use_cache=False)
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(15)
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="torch,cubin,vllm")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per tool (median reported)")
    ap.add_argument(
        "--cubin-sample",
        type=int,
        default=0,
        help="time the cuobjdump loop on N cubins and extrapolate (default: all)",
    )
    ap.add_argument("--profile", action="store_true", help="cProfile probe's scan for each case")
    ap.add_argument("--json", dest="json_out", help="also write the figures to this file")
    ap.add_argument(
        "--inflate",
        choices=("zlib", "zlib-ng", "isal"),
        help="force probe's inflater for wheels (PROBE_INFLATE; default: the fastest installed)",
    )
    ap.add_argument(
        "--probe-args",
        default="--all-targets",
        help="target selection passed to probe scan (default: --all-targets, i.e. verdicts "
        "for the 12 catalog GPUs; '--target sm_100' = one GPU, closer to a plain listing)",
    )
    args = ap.parse_args()
    PROBE_ARGS[:] = args.probe_args.split()
    if args.inflate:
        os.environ["PROBE_INFLATE"] = args.inflate  # inherited by the probe children

    from probe.arch.cuobjdump import find_cuobjdump

    tool = find_cuobjdump()
    if tool is None:
        print("cuobjdump not found: pip install nvidia-cuda-cuobjdump", file=sys.stderr)
        return 2
    version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    results = []
    for case in args.cases.split(","):
        if case == "torch":
            results.append(case_torch(tool, args.repeat))
        elif case == "cubin":
            results.append(case_cubin(tool, args.repeat, args.cubin_sample or None))
        elif case == "vllm":
            results.append(case_vllm(tool, args.repeat))
        else:
            ap.error(f"unknown case {case!r}")

    from tabulate import tabulate

    rows = []
    for r in results:
        p, c = r["probe"], r["cuobjdump"]
        rows.append(
            [
                r["case"],
                r["input"],
                f"{p['seconds']:.2f}",
                f"{p['peak_rss_kb'] / 1024:.0f}",
                f"{c['seconds']:.2f}",
                f"{c['peak_rss_kb'] / 1024:.0f}",
                f"{c['seconds'] / p['seconds']:.0f}x",
                f"1/{c['peak_rss_kb'] / p['peak_rss_kb']:.1f}",
                r["target"] + (f" ({c['note']})" if c.get("note") else ""),
            ]
        )
    from probe.arch.inflate import inflater

    print(
        f"cuobjdump: {tool} ({version[-1] if version else '?'}); python {sys.version.split()[0]}; "
        f"{os.cpu_count()} CPUs; inflater {inflater()[0]}; load average {os.getloadavg()[0]:.2f}"
    )
    print(
        tabulate(
            rows,
            headers=[
                "case",
                "input",
                "probe s",
                "probe MiB",
                "cuobjdump s",
                "cuobjdump MiB",
                "speed-up",
                "memory",
                "target",
            ],
        )
    )
    for r in results:
        if "inflate_floor" in r:
            f = r["inflate_floor"]
            cuo_s = r["cuobjdump"]["seconds"]
            mb, big_mb = f["bytes"] / 1e6, f["biggest_bytes"] / 1e6
            print(
                f"\nvllm inflate floor ({f['inflater']}, {f['threads']} threads): all .so members "
                f"{mb:.0f} MB in {f['seconds']:.2f} s ({mb / f['seconds']:.0f} MB/s); "
                f"{f['biggest_member']} alone {big_mb:.0f} MB in {f['biggest_seconds']:.2f} s. "
                f"20x of cuobjdump's {cuo_s:.2f} s would be {cuo_s / 20:.2f} s for the whole process."
            )
    if args.profile:
        for r in results:
            path = {
                "torch": lambda: [str(libtorch_cuda())],
                "cubin": lambda: [str(wheels.unpacked(wheels.wheel("flashinfer-cubin")))],
                "vllm": lambda: [str(wheels.wheel("vllm"))],
            }[str(r["case"])]()
            print(f"\n== cProfile: probe scan {r['case']}\n{profile(path)}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"cuobjdump": tool, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
