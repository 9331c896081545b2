"""`probe run --reuse` of the 1,296-cell H200 plan against the published H200 matrix, as a whole process.

Usage:  python3 benchmarks/bench_reuse.py [--python ~/.cache/probe-tests/venv-vllm-0.26.0/bin/python]
                                          [--repeat 3] [--out benchmarks/results/reuse_bench.json]

Inputs, made once in a temporary folder:
* the plan: ``matrices/measured/nvidia-h200-sm90-vllm-0.26.0.plan.json.gz`` narrowed to the 1,296 cells
  the published matrix holds (4 planned cells were never measured there);
* the baseline: the published matrix with every cell stamped as ``probe run`` stamps what it measures
  (``details.reuse``: probe version, GPU, driver, CUDA and the digests of the packages the cell runs on)
  for the environment of ``--python`` (a real installed vLLM + torch tree) on the H200 that
  ``tests/fixtures/fake-gpu/nvidia-smi`` reports: "the last run, measured with these very packages".

Cases (each a whole ``python3 -m probe run --plan-file PLAN --reuse BASELINE --python PY --journal J -o
M`` process, with the fake nvidia-smi first on PATH):
* cold: an empty digest cache (``$PROBE_CACHE_DIR``): every RECORD is read and hashed;
* warm: the digest cache of the cold run.
Each checks that 0 cells ran (every journal row carries ``details.reused_from``) and that the matrix has
all 1,296 cells. Then, through the library (no cells run: ``probe.run.prepare``), a FlashInfer-only change
(an overlay site folder, first on the path, holding a flashinfer-python whose RECORD differs): how many
cells would run, and that every one of them depends on FlashInfer; and the package digests alone, with an
empty and a warm cache. Targets: <= 10 s cold, <= 3 s warm.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MATRIX = ROOT / "matrices" / "measured" / "nvidia-h200-sm90-vllm-0.26.0.json"
PLAN = ROOT / "matrices" / "measured" / "nvidia-h200-sm90-vllm-0.26.0.plan.json.gz"
FAKE_GPU = ROOT / "tests" / "fixtures" / "fake-gpu"
VENV = Path.home() / ".cache" / "probe-tests" / "venv-vllm-0.26.0" / "bin" / "python"


def _env(cache: Path) -> dict[str, str]:
    return dict(os.environ, PATH=f"{FAKE_GPU}{os.pathsep}{os.environ['PATH']}", PROBE_CACHE_DIR=str(cache),
                PYTHONPATH=str(ROOT))  # fmt: skip


def prepare_inputs(work: Path, python: str) -> tuple[Path, Path, int]:
    """The narrowed plan and the stamped baseline; returns (plan, baseline, cells)."""
    from probe.matrix.build import nvidia_smi
    from probe.run.digests import DigestCache, import_path
    from probe.run.reuse import environment

    matrix = json.loads(MATRIX.read_text())
    measured = {c["id"] for c in matrix["cells"]}
    with gzip.open(PLAN) as f:
        plan = [c for c in json.loads(f.read()) if c["id"] in measured]
    os.environ["PATH"] = f"{FAKE_GPU}{os.pathsep}{os.environ['PATH']}"
    env = environment(import_path(python), nvidia_smi(), DigestCache(None))
    for c in matrix["cells"]:
        c["details"]["reuse"] = {"run": "published-h200", "inputs": env.cell_inputs(c["kind"], c["params"])}
    (work / "plan.json").write_text(json.dumps(plan))
    (work / "baseline.json").write_text(json.dumps(matrix, indent=1))
    return work / "plan.json", work / "baseline.json", len(plan)


def run_once(work: Path, plan: Path, baseline: Path, python: str, cache: Path, tag: str) -> dict[str, object]:
    journal, out = work / f"{tag}.jsonl", work / f"{tag}.json"
    cmd = [sys.executable, "-m", "probe", "run", "--plan-file", str(plan), "--reuse", str(baseline),
           "--python", python, "--journal", str(journal), "-o", str(out)]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=_env(cache), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"probe run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    rows = [json.loads(x) for x in journal.read_text().splitlines()[1:]]
    ran = sum(1 for r in rows if "reused_from" not in r["details"])
    cells = len(json.loads(out.read_text())["cells"])
    journal.unlink()
    out.unlink()
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "cells_ran": ran, "matrix_cells": cells}


def floor_once(work: Path) -> dict[str, float]:
    """The same interpreter starting probe and printing ``probe run --help`` (the start-up floor)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "probe", "run", "--help"], cwd=work, env=_env(work / "c"),
                   capture_output=True, check=True)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(time.perf_counter() - t0, 3), "cpu_s": round(cpu, 3)}


def flashinfer_change(work: Path, plan: Path, baseline: Path, python: str) -> dict[str, object]:
    """How many cells a FlashInfer-only change re-runs (dry, through the library)."""
    from probe.run import RunOptions, load_plan_file, prepare
    from probe.run.digests import import_path
    from probe.run.reuse import components_of

    site = import_path(python)
    overlay = work / "overlay"
    real = next(Path(s) for s in site if list(Path(s).glob("flashinfer_python-*.dist-info")))
    info = next(real.glob("flashinfer_python-*.dist-info"))
    shutil.copytree(info, overlay / info.name)
    with (overlay / info.name / "RECORD").open("a") as f:
        f.write("flashinfer/patched_after_the_baseline.py,sha256=0,1\n")
    specs = load_plan_file(plan)
    opts = RunOptions(cells=tuple(specs), reuse=str(baseline), site_dirs=(str(overlay), *site))
    planned = prepare(opts)
    rerun = [c.spec for c in planned.cells]
    on_fi = sum(1 for s in specs if "flashinfer" in components_of(s.kind.value, s.params))
    all_on_fi = all("flashinfer" in components_of(s.kind.value, s.params) for s in rerun)
    return {
        "cells_rerun": len(rerun),
        "cells_reused": len(planned.reused),
        "cells_on_flashinfer": on_fi,
        "every_rerun_cell_runs_on_flashinfer": all_on_fi,
    }


def digest_times(work: Path, python: str) -> dict[str, float]:
    """The package digests alone (in this process): with an empty cache, then with it warm."""
    from probe.run.digests import DigestCache, component_digests, import_path, installed
    from probe.run.reuse import deps_table

    site = import_path(python)
    comps = {k: tuple(v) for k, v in deps_table().groups.items()}
    out = {}
    for case in ("cold", "warm"):
        cache = DigestCache(work / "digest-cache.json")
        t0 = time.perf_counter()
        component_digests(installed(site), comps, cache)
        cache.save()
        out[f"digests_{case}_s"] = round(time.perf_counter() - t0, 4)
    return out


def _summary(runs: list[dict[str, float]]) -> dict[str, object]:
    return {
        "median_s": statistics.median(r["wall_s"] for r in runs),
        "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "runs": runs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=str(VENV), help="the installed vLLM + torch tree (its interpreter)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the figures here as JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="probe-bench-reuse-") as tmp:
        work = Path(tmp)
        plan, baseline, n = prepare_inputs(work, args.python)
        cold, warm, floor = [], [], []
        for i in range(args.repeat):  # round-robin: the box's load touches every case alike
            cache = work / f"cache-{i}"
            cold.append(run_once(work, plan, baseline, args.python, cache, f"cold{i}"))
            warm.append(run_once(work, plan, baseline, args.python, cache, f"warm{i}"))
            floor.append(floor_once(work))
        fi = flashinfer_change(work, plan, baseline, args.python)
        digests = digest_times(work, args.python)
    result = {
        "cells": n,
        "python": args.python,
        "cold": _summary(cold),
        "warm": _summary(warm),
        "floor_probe_run_help": _summary(floor),
        "flashinfer_only_change": fi,
        **digests,
    }
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
