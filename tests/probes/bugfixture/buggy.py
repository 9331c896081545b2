"""Cell targets that fail in different places (used as if this folder were probe's own code)."""

from __future__ import annotations

import json
from typing import Any


class _Layer:
    weight = None


def attribute_error(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("build")
    layer = _Layer()
    return {"outcome": "ok", "shape": layer.weight.shape}  # AttributeError raised right here


def raised_elsewhere(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("parse")
    return json.loads("{not json")  # innermost frame is in the json module, not here


def missing_module(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.phase("import")
    import probe_no_such_backend_module  # noqa: F401

    return {}


def stack_failure(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A failure of a process the probe supervised, handed on from probe-side code (a DP engine rank)."""
    import sys

    from probe.outcomes import StackFailure

    ctx.phase("engine_init")
    print("torch.AcceleratorError: CUDA error: an illegal memory access was encountered", file=sys.stderr)
    raise StackFailure("data-parallel rank 1 of 2 failed: torch.AcceleratorError", {"ranks": [{"rank": 1}]})
