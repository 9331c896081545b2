"""What a backend runs on beyond vLLM and torch (``probe/data/runtime_deps.json``): the installed
distributions grouped into components, which components each kind of cell and each backend uses, and
of those a backend imports, what to install and which module fails without it.

One table for two users: ``probe run --reuse`` (a cell is copied only when the digests of the
components it runs on did not change) and ``probe recommend`` (what the answer needs installed). Read
as plain JSON through the one data reader (``recommend`` starts without pydantic); :func:`validate`
checks the file with its pydantic model (the run path and the tests call it).
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Mapping
from typing import Any

from probe.catalog import datafiles

FILE = "runtime_deps.json"


def table() -> dict[str, Any]:
    data: dict[str, Any] = datafiles.read_json(FILE)
    return data


def _lookup(rows: Mapping[str, Any], key: str) -> Any:
    """Exact key, else the union of every matching pattern; no match: everything (``*``)."""
    if key in rows:
        return rows[key]
    hits = [v for k, v in rows.items() if any(ch in k for ch in "*?[") and fnmatch.fnmatchcase(key, k)]
    if not hits or any(h == "*" for h in hits):
        return "*"
    return sorted({c for h in hits for c in h})


@functools.cache
def components(kind: str, backend: str, fa: Any = None) -> tuple[str, ...]:
    """The components a cell of ``kind`` for ``backend`` (+ FA version) runs on, ``always`` included."""
    t = table()
    if kind in t["cells"]:
        found = t["cells"][kind]
    elif kind == "moe":
        found = _lookup(t["moe"], backend)
    elif kind == "attention":
        key = f"{backend}/fa{fa}"
        found = t["attention"][key] if key in t["attention"] else _lookup(t["attention"], backend)
    else:
        found = "*"
    return tuple(sorted(t["components"] if found == "*" else {*t["always"], *found}))


def imports(kind: str, backend: str, fa: Any = None) -> list[dict[str, str]]:
    """What ``backend`` imports at run time that an image may lack: ``{install, module, provenance}``
    per component (a backend the table does not name runs on everything: nothing specific is said)."""
    t = table()
    rows = t.get(kind)
    if not isinstance(rows, dict) or (_lookup(rows, backend) == "*" and f"{backend}/fa{fa}" not in rows):
        return []
    return [t["imports"][c] for c in components(kind, backend, fa) if c in t["imports"]]


def validate() -> Any:
    """The file checked by its pydantic model (:class:`probe.catalog.runtime_deps_schema.DepsFile`)."""
    from probe.catalog.runtime_deps_schema import DepsFile

    return datafiles.load(FILE, DepsFile)
