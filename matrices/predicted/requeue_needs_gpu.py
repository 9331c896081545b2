#!/usr/bin/env python3
"""Re-read published oracle cells with the oracle's current ``needs_gpu`` rule (no GPU run needed).

    python3 matrices/predicted/requeue_needs_gpu.py matrices/predicted/vllm-0.26.0

The 0.26.0 predictions were made on the GPU box with the child's ``CUDA_VISIBLE_DEVICES`` emptied; a check
that touched the GPU (CUTLASS_MLA) answered "No CUDA GPUs are available", which the rule of that day did
not recognise (case), so it was written as a refusal. Such a cell is ``skipped`` (the oracle could not
ask), exactly as ``probe predict`` now writes it; nothing else changes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from probe.oracle._child_base import needs_gpu


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
            print(f"{path}: {requeue(path)} cells -> skipped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
