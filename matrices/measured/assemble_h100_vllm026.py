#!/usr/bin/env python3
"""Rebuild ``nvidia-h100-sm90-vllm-0.26.0.json`` from the journals committed beside it.

    python3 matrices/measured/assemble_h100_vllm026.py        # from the repository root

The journals come from one session on a lent H100 (2026-11-23/24) with vLLM 0.26.0 + FlashInfer
0.6.14 + FA2 + nvidia-cutlass-dsl staged by ../shared/devkit, run by
``matrices/measured/h100-session/measure.sh`` (steps a, b, b; the journals were resumed across calls).
The one MoE row is left out: its cell was still JIT-compiling FlashInfer's CUTLASS MoE module
(175.7 s of nvcc / cicc) when the device call's own time limit stopped ``probe run``; the prober's
stop, not the kernel, ended it (see the provenance file).
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

STEM = "nvidia-h100-sm90-vllm-0.26.0"
JOURNALS = ("attention", "attention-fi", "engine")
IMAGE = (
    "devkit vllm-0.26.0 slim wheel + FA2 + flashinfer-python 0.6.14 + nvidia-cutlass-dsl 4.8.1 "
    "on torch 2.11.0+cu130"
)
DEVICE = {  # nvidia-smi on the H100 (h100-session/steps: gpu.txt) and the staged versions
    "host": "vm",
    "versions": {
        "torch": "2.11.0",
        "torch_cuda": "13.0",
        "driver": "580.159.04",
        "vllm": "0.26.0",
        "flashinfer": "0.6.14",
        "triton": "3.6.0",
    },
    "gpu": {
        "name": "NVIDIA H100 80GB HBM3",
        "sm": 90,
        "cc": "9.0",
        "memory_gib": 79.6,
        "integrated": False,
        "unified_memory": False,
        "count": 1,
    },
}


def journal(name: str) -> list[CellResult]:
    rows: dict[str, CellResult] = {}
    with gzip.open(HERE / f"{STEM}.{name}.journal.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if "outcome" in d:
                rows.setdefault(d["id"], CellResult.model_validate(d))
    return list(rows.values())


PLANNED = 78  # h100-session plans: 20 attention + 4 FLASHINFER attention + 48 MoE + 6 engine cells
# Reproduced twice (180 s, no result, phase prefill then decode) in the attention-layer probe only; FA2 ran
# in whole engines on the H200 (run 3): held back as a suspected probe-side hang until it is understood.
HELD_BACK = {"attention/FLASH_ATTN/fa2/h=32/kv=2/d=128"}


def main() -> int:
    results = [r for name in JOURNALS for r in journal(name) if r.id not in HELD_BACK]
    note = (
        "assembled by matrices/measured/assemble_h100_vllm026.py from the journals beside it; "
        "run by matrices/measured/h100-session/measure.sh (see the .provenance.md file)"
    )
    prov = {
        **DEVICE,
        "image": IMAGE,
        "image_digest": None,
        "created_at": "2026-11-24T00:40:00Z",
        "note": note,
    }
    matrix = build_matrix(results, provenance=prov, cells_planned=PLANNED)
    write_matrix(matrix, HERE / f"{STEM}.json")
    print(f"{len(matrix.cells)} cells from {', '.join(JOURNALS)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
