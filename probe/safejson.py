"""JSON from files probe did not write: parsed with a nesting limit, so a document nested thousands of
levels deep is an invalid input (a :class:`JsonLimitError` naming the limit), never a
``RecursionError`` in the parser or in whatever walks the result later.

:data:`MAX_DEPTH` is the limit of pydantic's own JSON parser (which validates matrix cells), so a
document is refused at the same depth wherever it is read. Standard library only (``probe scan``
starts fast).
"""

from __future__ import annotations

import json
from itertools import compress
from typing import Any

__all__ = ["MAX_DEPTH", "JsonLimitError", "check_depth", "loads"]

#: deepest nesting accepted (objects and arrays), as pydantic-core's parser
MAX_DEPTH = 200


class JsonLimitError(ValueError):
    """Valid JSON beyond a limit (nested deeper than :data:`MAX_DEPTH`)."""


_IS_CONTAINER = frozenset((dict, list)).__contains__


def _too_deep() -> JsonLimitError:
    return JsonLimitError(f"JSON nested more than {MAX_DEPTH} levels deep")


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`JsonLimitError` when ``value`` (parsed JSON: plain dicts and lists) nests deeper
    than ``limit``. Level by level, the containers of each level picked out at C speed (a 3 MB
    matrix: ~10 ms)."""
    level = [value] if type(value) in (dict, list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            raise _too_deep()
        below: list[Any] = []
        for node in level:
            children = node.values() if type(node) is dict else node
            below.extend(compress(children, map(_IS_CONTAINER, map(type, children))))
        level = below


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads`` with the nesting limit; ``json.JSONDecodeError`` (a ``ValueError``) for bad JSON,
    :class:`JsonLimitError` (a ``ValueError`` too) for a document nested too deeply."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise _too_deep() from None
    check_depth(value)
    return value
