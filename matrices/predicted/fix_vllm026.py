#!/usr/bin/env python3
"""Two corrections of the published vLLM 0.26.0 oracle cells, made after the GPU box was gone.

    python3 matrices/predicted/fix_vllm026.py matrices/predicted/vllm-0.26.0

1. The predictions were made on the GPU box with the child's ``CUDA_VISIBLE_DEVICES`` emptied; a check that
   touched the GPU (CUTLASS_MLA) answered "No CUDA GPUs are available", which the rule of that day did not
   recognise (case), so it was written as a refusal. Such a cell becomes ``skipped`` (the oracle could not
   ask), exactly as ``probe predict`` now writes it.
2. The MoE cells of models with squared-ReLU experts (Nemotron-3 Nano / Super) were asked with the gated
   ``RELU2`` activation; vLLM's nemotron_h builds non-gated ``RELU2_NO_MUL`` experts, which ``probe predict``
   now asks. Their answers are wrong, so they are removed until the next run on a vLLM 0.26 box re-asks them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from probe.oracle._child_base import needs_gpu

RELU2_MODELS = ("nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b")


def drop_relu2_moe(path: Path) -> int:
    doc = json.loads(path.read_text(encoding="utf-8"))
    keep = [c for c in doc["cells"] if not (c.get("kind") == "moe" and c.get("model") in RELU2_MODELS)]
    dropped = len(doc["cells"]) - len(keep)
    if dropped:
        text = path.read_text(encoding="utf-8").splitlines(keepends=True)
        out = [
            line
            for line in text
            if not (
                line.lstrip().startswith('{"')
                and '"kind":"moe"' in line.replace(" ", "")
                and any(f'"model":"{m}"' in line.replace(" ", "") for m in RELU2_MODELS)
            )
        ]
        body = "".join(out).replace("},\n]", "}\n]")
        json.loads(body)  # still one valid document
        path.write_text(body, encoding="utf-8")
    return dropped


def requeue(path: Path) -> int:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    changed = 0
    for i, line in enumerate(lines):
        if not line.lstrip().startswith('{"') or '"outcome":"unsupported"' not in line.replace(" ", ""):
            continue
        cell = json.loads(line.rstrip().rstrip(","))
        if needs_gpu(cell.get("root_cause") or ""):
            lines[i] = line.replace('"outcome": "unsupported"', '"outcome": "skipped"').replace(
                '"outcome":"unsupported"', '"outcome":"skipped"'
            )
            changed += 1
    path.write_text("".join(lines), encoding="utf-8")
    return changed


def main(argv: list[str]) -> int:
    for folder in argv:
        for path in sorted(Path(folder).glob("sm_*.json")):
            print(f"{path}: {requeue(path)} cells -> skipped, {drop_relu2_moe(path)} relu2 MoE cells removed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
