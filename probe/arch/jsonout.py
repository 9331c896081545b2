"""``probe scan --json`` text: the report's records written by json's C encoder, fast.

The ``lines`` layout puts one top-level key per line and one list item (file, verdict row) per
line; the piece-by-piece form (:func:`iter_json_lines`) never holds a second copy of a 100 MB
``--kernels`` report in memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from probe.arch.records import Record


def _default(obj: Any) -> Any:
    if isinstance(obj, Record):
        return obj.to_dict()
    dump = getattr(obj, "model_dump", None)  # a pydantic model inside ``backends``
    if callable(dump):
        return dump(mode="json")
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def iter_json_lines(record: Record | dict[str, Any]) -> Iterator[str]:
    """The ``lines`` layout of :func:`dumps` in pieces (write them one by one: no second copy of a
    100 MB report in memory)."""
    data = record.to_dict() if isinstance(record, Record) else record
    enc = json.JSONEncoder(default=_default, ensure_ascii=False, separators=(", ", ": ")).encode
    yield "{"
    sep = "\n"
    for k, v in data.items():
        if isinstance(v, list) and v:
            yield f"{sep} {enc(k)}: ["
            items = _verdict_lines(v, enc) if k == "verdicts" else map(enc, v)
            first = True
            for item in items:
                yield ("\n  " if first else ",\n  ") + item
                first = False
            yield "\n ]"
        else:
            yield f"{sep} {enc(k)}: {enc(v)}"
        sep = ",\n"
    yield "\n}"


def dumps(record: Record | dict[str, Any], *, indent: int | None = None, lines: bool = False) -> str:
    """JSON text of a record.

    ``lines``: one top-level key per line and one list item per line, each item written compactly
    by json's C encoder (readable and as fast as compact output; ``indent`` forces json's
    pure-Python encoder, ~10x slower on a 3,000-entry report).
    """
    if lines:
        return "".join(iter_json_lines(record))
    data = record.to_dict() if isinstance(record, Record) else record
    if indent is None:
        return json.dumps(data, default=_default, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(data, default=_default, ensure_ascii=False, indent=indent)


def _verdict_lines(rows: list[Any], enc: Callable[[Any], str]) -> Iterator[str]:
    """Verdict rows, encoding each shared per-target dict once (thousands of cubins share a few;
    per-kernel rows share the per-target verdicts)."""
    memo: dict[object, str] = {}
    for row in rows:
        if not isinstance(row, dict) or set(row) != {"path", "kernel", "targets"}:
            yield enc(row)
            continue
        t = row["targets"]
        s = memo.get(id(t))
        if s is None:
            key = tuple((k, id(v)) for k, v in t.items())
            s = memo.get(key)
            if s is None:
                s = memo[key] = enc(t)
            memo[id(t)] = s
        yield f'{{"path": {enc(row["path"])}, "kernel": {enc(row["kernel"])}, "targets": {s}}}'
