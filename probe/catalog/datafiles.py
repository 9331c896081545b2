"""The one reader of probe's packaged data (``probe/data``): parsed once per process, validated at load.

Every packaged file (GPU catalog, backend catalog, model profiles, failure signatures, vLLM flag
spellings, field reports, oracle routing) is read through :func:`read_json` (plain JSON, cached: callers
treat the result as read-only) or :func:`load` (validated by a pydantic model of the catalog). A missing
or malformed file is a bug in probe's package: :class:`~probe.errors.DataFileError`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, TypeVar

from probe.errors import DataFileError

M = TypeVar("M")

# probe is an ordinary package on a file system (its data files are read by path throughout; not
# importlib.resources, whose import alone costs `probe recommend` ~7 ms of its start-up).
DATA = Path(__file__).resolve().parent.parent / "data"


@functools.cache
def read_json(name: str) -> Any:
    """``probe/data/<name>`` parsed (``name`` may hold a sub-folder: ``models/x.json``); cached."""
    try:
        text = (DATA / name).read_text(encoding="utf-8")
    except OSError as exc:
        raise DataFileError(f"packaged data file probe/data/{name} is missing: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DataFileError(f"packaged data file probe/data/{name} is not JSON: {exc}") from exc


@functools.cache
def list_folder(name: str) -> tuple[str, ...]:
    """The ``*.json`` files of ``probe/data/<name>/``, as ``<name>/<file>``, sorted by file name."""
    folder = DATA / name
    try:
        entries = sorted(e.name for e in folder.iterdir() if e.name.endswith(".json"))
    except OSError as exc:
        raise DataFileError(f"packaged data folder probe/data/{name} is missing: {exc}") from exc
    return tuple(f"{name}/{e}" for e in entries)


def published_matrices() -> Path | None:
    """The published matrices shipped with the package (``probe/data/matrices``: in a checkout a link
    to the repository's ``matrices/``; in an installed package a copy of its ``*.json`` files and
    per-GPU prediction sets); None when the package was installed without them."""
    path = (DATA / "matrices").resolve()  # a checkout: its matrices/
    return path if path.is_dir() else None


def load(name: str, model: type[M]) -> M:
    """``probe/data/<name>`` validated by a pydantic model (``model.model_validate``), once per process."""
    key = (name, model)
    if key not in _VALIDATED:
        from pydantic import ValidationError

        try:
            _VALIDATED[key] = model.model_validate(read_json(name))  # type: ignore[attr-defined]
        except ValidationError as exc:
            raise DataFileError(f"packaged data file probe/data/{name} is invalid: {exc}") from exc
    return _VALIDATED[key]


_VALIDATED: dict[tuple[str, type[Any]], Any] = {}
