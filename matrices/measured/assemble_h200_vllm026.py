#!/usr/bin/env python3
"""Rebuild ``nvidia-h200-sm90-vllm-0.26.0.json`` from the journals committed beside it.

    python3 matrices/measured/assemble_h200_vllm026.py        # from the repository root

The cells come from three rounds on lent H200s with the same staged vLLM 0.26.0 (see the
``.provenance.md`` file), newest first; a cell id takes the first round that has a usable row:

1. ``run3-kernel`` (this session, ``-j 4``, probe with the GPU lock and the memory fixes): the
   900-cell kernel-level MoE matrix. Its 4 ``oom`` rows were a ``-j 4`` budget shortfall (the
   per-worker overhead was not counted yet), not a property of the kernels: they are skipped.
2. ``run3`` (this session): engine and attention cells. Its kernel-level rows are superseded by 1.
3. ``run1`` with ``run2-*`` re-runs replacing rows of the same id (first session, ``-j 1``, an
   install without FA2): the import cell and the per-model MoE shapes, minus the rows whose failure
   was a probe bug (listed in the provenance file) and minus FA2 attention rows (FA2 was not
   installed then; it is in run 3's install).

Root causes journaled before this session's classifier fix keep their logger prefix (``WARNING
11-22 04:20:39 [file.py:1085] ...``); they are re-read without it, as ``probe run`` now records them.

The plan is the one run 3 ran (``*.plan.json.gz``: the default plan for 122b,35b,nano plus engine
pairs of qwen3-30b-a3b and gpt-oss-20b); cells of it that no round measured stay missing, so
``run.status`` says ``partial``.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from probe.cells import CellResult  # noqa: E402
from probe.matrix.build import build_matrix, write_matrix  # noqa: E402
from probe.sandbox.classify import strip_prefixes  # noqa: E402

STEM = "nvidia-h200-sm90-vllm-0.26.0"
IMAGE = (
    "devkit vllm-0.26.0 slim wheel + FA2 (no flashinfer, no nvidia-cutlass-dsl, no amd-quark) "
    "on torch 2.11.0+cu130"
)
DEVICE = {  # collected on the H200 by `probe run` (collect_provenance + the import cell)
    "host": "vm",
    "platform": "Linux-6.18.44-fc-v657-gpu x86_64",
    "versions": {
        "python": "3.12.3",
        "torch": "2.11.0",
        "torch_cuda": "13.0",
        "cuda_runtime": "13.0.96",
        "driver": "580.159.04",
        "vllm": "0.26.0",
        "flashinfer": None,
        "flashinfer_cubin": None,
        "flashinfer_jit_cache": None,
        "flash_attn": None,
        "triton": "3.6.0",
        "transformers": "5.17.0",
    },
    "gpu": {
        "name": "NVIDIA H200",
        "sm": 90,
        "cc": "9.0",
        "memory_gib": 140.4,
        "integrated": False,
        "unified_memory": False,
        "count": 1,
    },
}


def journal(name: str) -> dict[str, CellResult]:
    rows: dict[str, CellResult] = {}
    with gzip.open(HERE / f"{STEM}.{name}.journal.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if "outcome" in d:
                rows.setdefault(d["id"], CellResult.model_validate(d))  # the first row of an id counts
    return rows


def probe_bug(r: CellResult) -> bool:
    """Round-1 failures caused by probe itself (fixed since; see the provenance file)."""
    cause = r.root_cause or ""
    return "'_NoModelConfig' object has no attribute" in cause or (
        r.kind == "engine" and "Invalid type of HuggingFace config" in cause
    )


def main() -> int:
    with gzip.open(HERE / f"{STEM}.plan.json.gz", "rt", encoding="utf-8") as f:
        plan = [c["id"] for c in json.load(f)]
    kernel = {k: r for k, r in journal("run3-kernel").items() if r.outcome.value != "oom"}
    run3 = {k: r for k, r in journal("run3").items() if r.kind in ("engine", "attention")}
    old = journal("run1")
    for extra in ("run2-mxfp4", "run2-attention"):
        for k, r in journal(extra).items():
            old[k] = r.model_copy(update={"details": {**r.details, "rerun": extra}})
    old = {
        k: r
        for k, r in old.items()
        if not probe_bug(r) and not (r.kind == "attention" and r.params.get("fa_version") == 2)
    }
    picked: list[CellResult] = []
    origin: dict[str, int] = {"run3-kernel": 0, "run3": 0, "run1/run2": 0}
    for cid in plan:
        for label, rows in (("run3-kernel", kernel), ("run3", run3), ("run1/run2", old)):
            if cid in rows:
                r = rows[cid]
                upd: dict = {"details": {**r.details, "source_round": label}}
                if r.root_cause:  # rows journaled before the classifier dropped logger prefixes
                    upd["root_cause"] = strip_prefixes(r.root_cause).strip() or r.root_cause
                picked.append(r.model_copy(update=upd))
                origin[label] += 1
                break
    missing = [cid for cid in plan if cid not in {r.id for r in picked}]
    note = (
        f"assembled by matrices/measured/assemble_h200_vllm026.py from the journals beside it: "
        f"{origin['run3-kernel']} cells from run3-kernel (-j 4), {origin['run3']} from run3, "
        f"{origin['run1/run2']} from run1/run2 (-j 1, no FA2 installed); {len(missing)} planned cells "
        f"not measured: {', '.join(missing)}"
    )
    prov = {**DEVICE, "image": IMAGE, "image_digest": None, "created_at": "2026-11-22T05:05:00Z"}
    prov["note"] = note
    m = build_matrix(picked, provenance=prov, cells_planned=len(plan))
    write_matrix(m, HERE / f"{STEM}.json")
    print(f"{len(picked)}/{len(plan)} cells; {origin}; missing {len(missing)}: {missing}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
