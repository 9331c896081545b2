#!/usr/bin/env python3
"""Issue 11's GPU session: FlashInfer / FA4 / JIT-built kernels measured, in two device calls of <= 10 min.

Run on the lent GPU after staging vLLM 0.26.0 + FlashInfer 0.6.14 (+ WITH_FA2=1, WITH_CUTE_DSL=1) with
../shared/devkit, from the repository root, back to back (JIT caches live only while the machine is warm):

    python3 benchmarks/gpu_session_issue11.py --part 1     # env, warm pre-pass (background), attention
                                                          # layer matrix, flashinfer_* MoE cells
    python3 benchmarks/gpu_session_issue11.py --part 2     # unfinished MoE cells, engine pairs with
                                                          # FLASHINFER / flashinfer_cutlass, MLA engine cells
    python3 benchmarks/gpu_session_issue11.py --part 3     # (if time is left) resume whatever is missing
    python3 benchmarks/gpu_session_issue11.py --dry-run    # write the plan files and print the steps

Everything goes to ``$OUT`` (or ``--out``) as it happens: one ``<step>.log`` per step, the step's journal
(``<step>.jsonl``, fsync'ed by ``probe run``) and matrix, ``warm.json`` (JIT cache folders and sizes
before / after), ``env.json`` and ``session.json`` (per step: exit code, wall time, timed out or skipped).
A step that fails or runs out of time never stops the next one; each step has a wall-clock cap and the
whole part stops ``--reserve-s`` before ``--budget-s`` so the files are written before the call's limit.
Journals are also kept in ``--work`` (default /tmp/probe-issue11), so part 2 resumes what part 1 left.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probe.catalog.models import resolve_model  # noqa: E402
from probe.probes.engine import ENGINE_ENV  # noqa: E402
from probe.probes.moe import QUANTS, estimate_mem_gib  # noqa: E402

LAYER_TARGET = "probe.probes.attention_layer:run"
ATTN_MODELS = ("nano", "120b", "122b")  # dense-attention head layouts of the default models
MLA_MODEL = "deepseek-v3"
LAYER_BACKENDS = ("TRITON_ATTN", "FLASH_ATTN", "FLEX_ATTENTION", "FLASHINFER")  # FLASHINFER last: JIT
MLA_BACKENDS = ("FLASHMLA", "FLASH_ATTN_MLA", "TRITON_MLA", "FLASHINFER_MLA", "CUTLASS_MLA")
FI_MOE = ("flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cutedsl", "flashinfer_b12x")
MOE_SHAPES = (("120b", 1), (MLA_MODEL, 8))  # gpt-oss-120b at TP=1, DeepSeek-V3 per TP=8 shard
JIT_TIMEOUT_S = 1200.0


def _cell(
    cid: str, kind: str, target: str, params: dict[str, Any], timeout_s: float, **kw: Any
) -> dict[str, Any]:
    return {"id": cid, "kind": kind, "target": target, "params": params, "timeout_s": timeout_s, **kw}


def attention_cells() -> list[dict[str, Any]]:
    """Layer cells: every backend x FA version x head layout; gpt-oss also with its sliding window."""
    out = []
    for name in ATTN_MODELS:
        m = resolve_model(name)
        a = m.attention_shape(1)
        hybrid = m.hybrid or {}
        sinks = bool(hybrid.get("attention_sinks"))
        windows = [None] + ([int(hybrid["sliding_window"])] if hybrid.get("sliding_window") else [])
        for b in LAYER_BACKENDS:
            for fa in (2, 3, 4) if b == "FLASH_ATTN" else (None,):
                for sw in windows:
                    params = {"backend": b, "fa_version": fa, "num_heads": a["num_heads"],
                              "num_kv_heads": a["num_kv_heads"], "head_dim": a["head_dim"],
                              "hidden": m.hidden_size, "model": m.slug, "mla": False, "sinks": sinks,
                              "sliding_window": sw, "mem_gib": 4.0}  # fmt: skip
                    tag = (
                        f"/fa{fa}" if fa else ""
                    ) + f"/h={a['num_heads']}/kv={a['num_kv_heads']}/d={a['head_dim']}"
                    tag += ("/sinks" if sinks else "") + (f"/sw={sw}" if sw else "")
                    # one warm worker per backend: no KV-layout / selector state crosses backends
                    # FLASHINFER may JIT-compile for minutes (the warm pre-pass should have done it);
                    # the others compile at most Triton / CuTe-DSL kernels
                    limit = 600.0 if b == "FLASHINFER" else 180.0
                    out.append(_cell(f"attention/{b}{tag}", "attention", LAYER_TARGET, params, limit,
                                     env={"PROBE_ATTN_BACKEND": b}))  # fmt: skip
    return out


def moe_cells() -> list[dict[str, Any]]:
    out = []
    for name, tp in MOE_SHAPES:
        m = resolve_model(name)
        s = m.moe_shape(tp)
        assert s is not None
        e, h, i, k = s["experts"], s["hidden"], s["intermediate"], s["top_k"]
        for b in FI_MOE:
            for q in QUANTS:
                params = {"backend": b, "quant": q, "experts": e, "hidden": h, "intermediate": i, "top_k": k,
                          "tp": tp, "model": m.slug, "batch_sizes": [1, 64], "matrix": "model",
                          "mem_gib": estimate_mem_gib(e, h, i)}  # fmt: skip
                cid = f"moe/{b}/{q}/E={e}/H={h}/I={i}/k={k}/tp={tp}"
                out.append(_cell(cid, "moe", "probe.probes.moe:run", params, JIT_TIMEOUT_S))
    return out


def engine_cells() -> list[dict[str, Any]]:
    """FLASHINFER attention and flashinfer_cutlass MoE in whole (2-layer, dummy-weight) engines."""
    out = []
    for name in ("120b", MLA_MODEL):
        m = resolve_model(name)
        for moe_b, attn_b in (
            ("flashinfer_cutlass", "FLASHINFER"),
            ("auto", "FLASHINFER"),
            ("flashinfer_cutlass", "auto"),
        ):
            if m.mla is not None and attn_b == "FLASHINFER":
                attn_b = "FLASHINFER_MLA"  # an MLA model takes the MLA variant (sm100 only: refused on sm90)
            params = {"model": m.slug, "moe_backend": moe_b, "attention_backend": attn_b, "fa_version": None,
                      "quant": m.quant, "layers": 2, "mem_gib": 40.0, "exclusive": True}  # fmt: skip
            cid = f"engine/{m.slug}/{m.quant}/{moe_b}+{attn_b}"
            out.append(_cell(cid, "engine", "probe.probes.engine:run", params, 900.0,
                             env=dict(ENGINE_ENV), isolate=True))  # fmt: skip
    return out


def mla_cells() -> list[dict[str, Any]]:
    m = resolve_model(MLA_MODEL)
    a = m.attention_shape(1)
    out = []
    for b in MLA_BACKENDS:
        params = {"backend": b, "fa_version": None, "num_heads": a["num_heads"],
                  "num_kv_heads": a["num_kv_heads"], "head_dim": a["head_dim"], "hidden": m.hidden_size,
                  "model": m.slug, "mla": True, "mem_gib": 30.0, "exclusive": True}  # fmt: skip
        cid = f"attention/{b}/h={a['num_heads']}/kv={a['num_kv_heads']}/d={a['head_dim']}/mla"
        out.append(_cell(cid, "attention", "probe.probes.engine:run_attention", params, 600.0,
                         env=dict(ENGINE_ENV), isolate=True))  # fmt: skip
    return out


def warm_params() -> list[dict[str, Any]]:
    """The pre-pass, one background process each (different JIT modules build in parallel): FlashInfer's
    CUTLASS MoE module (minutes of nvcc), and one untimed FLASHINFER layer run per head layout."""
    fi = [c["params"] for c in attention_cells() if c["params"]["backend"] == "FLASHINFER"]
    return [{"flashinfer_moe": True}] + [{"attention_cells": [p]} for p in fi]


PLANS = {
    "attention": lambda: [c for c in attention_cells() if c["params"]["backend"] != "FLASHINFER"],
    "attention-fi": lambda: [c for c in attention_cells() if c["params"]["backend"] == "FLASHINFER"],
    "moe": moe_cells,
    "engine": engine_cells,
    "mla": mla_cells,
}
WARM_CODE = (
    "import json, sys; from probe.probes import jit_warm; from probe.probes.common import LocalContext; "
    "r = jit_warm.run(json.loads(sys.argv[1]), LocalContext()); "
    "open(sys.argv[2], 'w').write(json.dumps(r, indent=1, default=str)); print(r['outcome'], r['timings'])"
)
ENV_CODE = (
    "import json, sys, importlib.metadata as md; from probe.sandbox.jit import cache_report; "
    "v = {}\n"
    "for p in ('torch', 'vllm', 'flashinfer-python', 'nvidia-cutlass-dsl', 'triton', 'apache-tvm-ffi'):\n"
    "    try: v[p] = md.version(p)\n"
    "    except Exception as e: v[p] = None\n"
    "import subprocess\n"
    "q = ['nvidia-smi', '--query-gpu=name,driver_version,memory.total,compute_cap', '--format=csv']\n"
    "try: gpu = subprocess.run(q, capture_output=True, text=True, timeout=20).stdout.strip()\n"
    "except Exception as e: gpu = repr(e)\n"
    "json.dump({'versions': v, 'gpu': gpu, 'caches': cache_report()}, open(sys.argv[1], 'w'), indent=1)"
)


class Session:
    """Runs steps under one wall-clock budget; every step's output lands in ``out`` as it is written."""

    def __init__(self, out: Path, work: Path, budget_s: float, reserve_s: float) -> None:
        self.out, self.work = out, work
        self.t0 = time.monotonic()
        self.deadline = self.t0 + budget_s - reserve_s
        self.record: dict[str, Any] = {"steps": []}
        self._help: str | None = None
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        self.probe = [sys.executable, "-m", "probe"]
        self.env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        self.env.setdefault("FLASHINFER_NVCC_THREADS", "2")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def _save(self) -> None:
        self.record["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        (self.out / "session.json").write_text(json.dumps(self.record, indent=1))

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.out / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT,
                                start_new_session=True)  # fmt: skip

    def wait(self, name: str, proc: subprocess.Popen[bytes], cap_s: float, t_start: float) -> int | None:
        """Wait up to ``cap_s`` (and the part's deadline), then stop the step's process group."""
        limit = min(t_start + cap_s, self.deadline)
        timed_out = False
        while proc.poll() is None:
            if time.monotonic() >= limit:
                timed_out = True
                self._stop(proc)
                break
            time.sleep(0.5)
        entry = {"step": name, "rc": proc.returncode, "wall_s": round(time.monotonic() - t_start, 1),
                 "timed_out": timed_out}  # fmt: skip
        self.record["steps"].append(entry)
        if name.startswith("warm") and proc.returncode == 0:
            (self.work / f"{name}.ok").touch()
        self._save()
        print(f"[{self.record.get('elapsed_s')} s] {name}: {entry}", flush=True)
        return proc.returncode

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes]) -> None:
        """SIGINT (probe run closes its journal; its workers follow their parent), then TERM, then KILL."""
        for sig, grace in ((signal.SIGINT, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue

    def step(self, name: str, argv: list[str], cap_s: float, min_s: float = 30.0) -> int | None:
        if self.left() < min_s:
            self.record["steps"].append({"step": name, "skipped": f"{self.left():.0f} s left"})
            self._save()
            return None
        t = time.monotonic()
        return self.wait(name, self.start(name, argv), cap_s, t)

    def probe_run(self, name: str, plan: Path, cap_s: float, jobs: int = 1) -> int | None:
        """``probe run`` over a plan file; the journal lives in ``out`` and is mirrored to ``work``."""
        journal, keep = self.out / f"{name}.jsonl", self.work / f"{name}.jsonl"
        if keep.exists() and not journal.exists():
            shutil.copy(keep, journal)  # part 2 resumes what part 1 left
        argv = [*self.probe, "run", "--plan-file", str(plan), "--journal", str(journal),
                "-o", str(self.out / f"{name}-matrix.json"), "-j", str(jobs)]  # fmt: skip
        if journal.exists():
            argv.append("--resume")
        if self.supports("--jit-timeout"):
            argv += ["--jit-timeout", str(int(JIT_TIMEOUT_S))]
        rc = self.step(name, argv, cap_s)
        if journal.exists():
            shutil.copy(journal, keep)
        return rc

    def supports(self, flag: str) -> bool:
        if self._help is None:
            r = subprocess.run([*self.probe, "run", "--help"], capture_output=True, text=True, env=self.env,
                               cwd=ROOT, check=False)  # fmt: skip
            self._help = r.stdout
        return flag in self._help


def write_plans(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, make in PLANS.items():
        paths[name] = folder / f"plan-{name}.json"
        paths[name].write_text(json.dumps(make(), indent=1))
    return paths


def start_warm(s: Session) -> list[tuple[str, subprocess.Popen[bytes], float]]:
    procs = []
    for i, params in enumerate(warm_params()):
        name = "warm-moe" if params.get("flashinfer_moe") else f"warm-attn{i}"
        # niced: the compilers (children inherit it) yield the CPU to the timed cells running meanwhile
        argv = [
            "nice",
            "-n",
            "19",
            sys.executable,
            "-c",
            WARM_CODE,
            json.dumps(params),
            str(s.out / f"{name}.json"),
        ]
        procs.append((name, s.start(name, argv), time.monotonic()))
    return procs


def part1(s: Session, plans: dict[str, Path]) -> None:
    """Warm pre-pass in the background; the non-FlashInfer attention matrix meanwhile; then the rest."""
    s.step("env", [sys.executable, "-c", ENV_CODE, str(s.out / "env.json")], 60)
    warm = start_warm(s)
    s.probe_run("attention", plans["attention"], cap_s=240, jobs=2)
    for name, proc, t in warm[1:]:  # the FLASHINFER layouts' JIT
        s.wait(name, proc, cap_s=max(0.0, s.left() - 200), t_start=t)
    s.probe_run("attention-fi", plans["attention-fi"], cap_s=120)
    name, proc, t = warm[0]
    s.wait(name, proc, cap_s=max(0.0, s.left() - 60), t_start=t)  # the flashinfer_* MoE cells need it
    s.probe_run("moe", plans["moe"], cap_s=s.left(), jobs=2)


def part2(s: Session, plans: dict[str, Path]) -> None:
    """What part 1 left (resumed journals), then whole engines: FLASHINFER / flashinfer_cutlass pairs, MLA."""
    if not (s.work / "warm-moe.ok").exists():  # part 1 did not finish building it
        s.step("warm-moe", [sys.executable, "-c", WARM_CODE, json.dumps({"flashinfer_moe": True}),
                            str(s.out / "warm-moe.json")], cap_s=240)  # fmt: skip
    s.probe_run("moe", plans["moe"], cap_s=200, jobs=2)
    s.probe_run("attention-fi", plans["attention-fi"], cap_s=90)
    s.probe_run("engine", plans["engine"], cap_s=max(60.0, s.left() - 120))
    s.probe_run("mla", plans["mla"], cap_s=s.left())
    s.step("caches", [sys.executable, "-c", ENV_CODE, str(s.out / "caches-end.json")], 30, min_s=5)


def part3(s: Session, plans: dict[str, Path]) -> None:
    """Anything still missing, every journal resumed (a finished journal costs seconds)."""
    for name in ("attention", "attention-fi", "moe", "engine", "mla"):
        s.probe_run(name, plans[name], cap_s=s.left(), jobs=2 if name == "moe" else 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("1", "2", "3"), default="1", help="3: resume whatever is missing")
    ap.add_argument("--out", default=os.environ.get("OUT") or "issue11-out")
    ap.add_argument("--work", default="/tmp/probe-issue11")
    ap.add_argument("--budget-s", type=float, default=580.0, help="wall clock of this call (default 580)")
    ap.add_argument("--reserve-s", type=float, default=45.0, help="stop this long before the budget")
    ap.add_argument(
        "--dry-run", action="store_true", help="write the plan files, print the steps, run nothing"
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    plans = write_plans(out / "plans")
    if args.dry_run:
        for name, path in plans.items():
            print(f"{name}: {len(json.loads(path.read_text()))} cells -> {path}")
        for params in warm_params():
            print(f"warm: {json.dumps(params)}")
        return 0
    s = Session(out, Path(args.work), args.budget_s, args.reserve_s)
    {"1": part1, "2": part2, "3": part3}[args.part](s, plans)
    s._save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
