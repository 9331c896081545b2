"""JSON from files probe did not write: parsed with a nesting limit, so a document nested thousands of
levels deep is an invalid input (a :class:`JsonLimitError` naming the limit), never a
``RecursionError`` in the parser or in whatever walks the result later.

:data:`MAX_DEPTH` is the limit of pydantic's own JSON parser (which validates matrix cells), so a
document is refused at the same depth wherever it is read. Standard library only (``probe scan``
starts fast).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_DEPTH", "JsonLimitError", "check_depth", "loads"]

#: deepest nesting accepted (objects and arrays), as pydantic-core's parser
MAX_DEPTH = 200


class JsonLimitError(ValueError):
    """Valid JSON beyond a limit (nested deeper than :data:`MAX_DEPTH`)."""


def _too_deep() -> JsonLimitError:
    return JsonLimitError(f"JSON nested more than {MAX_DEPTH} levels deep")


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`JsonLimitError` when ``value`` (parsed JSON) nests deeper than ``limit``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth > limit:
            raise _too_deep()
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads`` with the nesting limit; ``json.JSONDecodeError`` (a ``ValueError``) for bad JSON,
    :class:`JsonLimitError` (a ``ValueError`` too) for a document nested too deeply."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise _too_deep() from None
    check_depth(value)
    return value
