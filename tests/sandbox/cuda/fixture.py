"""Probe target for the GPU fault fixtures: run the nvcc-built host program, let the classifier judge."""

from __future__ import annotations

import subprocess
import sys
from typing import Any


def run(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("launch")
    proc = subprocess.run(
        [params["exe"], params["mode"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=120,
        check=False,
    )
    sys.stdout.write(proc.stdout.decode(errors="replace"))
    sys.stdout.flush()
    if proc.returncode == 2:
        return {"outcome": "wrong_output", "root_cause": "fixture: device result differs from the reference"}
    if proc.returncode != 0:
        raise RuntimeError(f"fixture {params['mode']} exited with {proc.returncode}")
    return {"details": {"mode": params["mode"]}}
