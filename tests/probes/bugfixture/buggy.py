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
