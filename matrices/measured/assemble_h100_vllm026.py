#!/usr/bin/env python3
"""Rebuild ``nvidia-h100-sm90-vllm-0.26.0.json`` from the journals committed beside it.

    python3 matrices/measured/assemble_h100_vllm026.py        # from the repository root

Two sessions on lent H100s, vLLM 0.26.0 + FlashInfer 0.6.14 + FA2 staged by ../shared/devkit:

* session 1 (2026-11-23/24, ``h100-session/measure.sh``; journals ``<stem>.<name>.journal.jsonl.gz``):
  nvidia-cutlass-dsl 4.8.1 staged without its ``libs-core`` wheel (no ``cutlass.cute``: FA4 could
  not import), FlashInfer's CUTLASS MoE module never finished its JIT build;
* session 2 (2026-11-24, ``h100-session2/measure.sh``; journals ``<stem>.s2-<name>.journal.jsonl.gz``):
  the CuTe-DSL and quack versions vLLM 0.26.0 pins (4.6.0 / 0.6.1), FlashInfer's ``fused_moe_90``
  built ahead as an AOT module (``h100-session2/fi_aot.py``), FA2 measured with its driver PTX JIT.

Session 2 re-measured every cell of session 1: the matrix is session 2's, each cell whose outcome
changed keeps session 1's in ``details.superseded`` (as ``probe merge`` does for runs of one GPU).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from probe.cells import CellResult  # noqa: E402
from probe.matrix.build import build_matrix, write_matrix  # noqa: E402
from probe.matrix.merge import union  # noqa: E402

STEM = "nvidia-h100-sm90-vllm-0.26.0"
S1 = ("attention", "attention-fi", "engine")
# in the order they ran: a later journal's row of a cell wins (lease 5's cold attention run over lease 4's)
S2 = (
    "s2-attention",
    "s2-fa2-check",
    "s2-engine-attn",
    "s2-attention-c",
    "s2-attention-w",
    "s2-moe",
    "s2-engine-fi",
    "s2-attention-d",
    "s2-moe-d",
    "s2-engine-fi-d",
)
S1_IMAGE = (
    "devkit vllm-0.26.0 slim wheel + FA2 + flashinfer-python 0.6.14 + nvidia-cutlass-dsl 4.8.1 "
    "(without libs-core) on torch 2.11.0+cu130"
)
S2_IMAGE = (
    "devkit vllm-0.26.0 slim wheel + FA2 + flashinfer-python 0.6.14 (fused_moe_90 prebuilt as AOT) + "
    "nvidia-cutlass-dsl 4.6.0 + quack-kernels 0.6.1 on torch 2.11.0+cu130"
)
DEVICE: dict[str, Any] = {  # nvidia-smi on the H100s (h100-session*/) and the staged versions
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
# h100-session2 plans: 24 attention-layer + 48 flashinfer_* MoE + 11 engine cells
PLANNED = 83


def journal(name: str) -> dict[str, CellResult]:
    path = HERE / f"{STEM}.{name}.journal.jsonl.gz"
    rows: dict[str, CellResult] = {}
    if not path.exists():
        return rows
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if "outcome" in d:
                rows[d["id"]] = CellResult.model_validate(d)  # a resumed journal: the last row wins
    return rows


def session(names: tuple[str, ...], image: str, created: str, note: str) -> Any:
    results: dict[str, CellResult] = {}
    for name in names:
        results.update(journal(name))
    prov = {**DEVICE, "image": image, "image_digest": None, "created_at": created, "note": note}
    return build_matrix(list(results.values()), provenance=prov, cells_planned=PLANNED)


def main() -> int:
    how = "assembled by matrices/measured/assemble_h100_vllm026.py from the journals beside it; run by "
    s1 = session(S1, S1_IMAGE, "2026-11-24T00:40:00Z", how + "h100-session/measure.sh")
    s2 = session(S2, S2_IMAGE, "2026-11-24T14:00:00Z", how + "h100-session2/measure.sh")
    s1_ids = {c.id for c in s1.cells}
    s2_ids = {c.id for c in s2.cells}
    if not s1_ids <= s2_ids:
        raise SystemExit(f"session 1 cells not re-measured in session 2: {sorted(s1_ids - s2_ids)}")
    matrix = union([s1, s2])
    write_matrix(matrix, HERE / f"{STEM}.json")
    changed = sum(1 for c in matrix.cells if c.details.get("superseded"))
    print(f"{len(matrix.cells)} cells ({changed} changed since session 1) -> {STEM}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
