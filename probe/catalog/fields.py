"""Reading one JSON object of a packaged data file field by field, each checked as it is taken.

The catalogs that ``probe scan`` and ``probe recommend`` consult on their start-up paths (GPUs,
backends) are frozen dataclasses built by hand rather than pydantic models: building pydantic models
costs more than those verbs' whole answer. :class:`Fields` keeps that hand validation short and its
messages exact (``backends[3].vllm.quants[1]: 'fp9' is not one of …``). Every problem raises
:class:`ValueError`; the loader turns it into :class:`~probe.errors.DataFileError` (a bug in probe).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
_MISSING: Any = object()
VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def need(cond: bool, what: str) -> None:
    """Raise ``ValueError(what)`` unless ``cond``."""
    if not cond:
        raise ValueError(what)


class Fields:
    """One JSON object at ``where``; only the ``allowed`` keys may appear (``required`` ones must)."""

    def __init__(self, raw: Any, where: str, allowed: Iterable[str], required: Iterable[str] = ()) -> None:
        need(isinstance(raw, dict), f"{where}: expected an object")
        self.raw: dict[str, Any] = raw
        self.where = where
        unknown = sorted(set(raw) - set(allowed))
        need(not unknown, f"{where}: unknown fields {unknown}")
        missing = sorted(set(required) - set(raw))
        need(not missing, f"{where}: missing fields {missing}")

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def text(self, key: str, default: Any = _MISSING) -> Any:
        """A non-empty string (``default`` when absent or null; absent with no default: an error)."""
        value = self.raw.get(key)
        if value is None:
            need(default is not _MISSING, f"{self.at(key)}: required")
            return default
        need(isinstance(value, str) and value != "", f"{self.at(key)}: expected non-empty text")
        return value

    def version(self, key: str) -> str | None:
        """An ``X.Y.Z`` version, or None."""
        value = self.text(key, None)
        need(value is None or bool(VERSION.match(value)), f"{self.at(key)}: {value!r} is not X.Y.Z")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.raw.get(key, default)
        need(isinstance(value, bool), f"{self.at(key)}: expected true or false")
        return bool(value)

    def integer(self, key: str, default: Any = _MISSING) -> Any:
        value = self.raw.get(key)
        if value is None:
            need(default is not _MISSING, f"{self.at(key)}: required")
            return default
        need(type(value) is int, f"{self.at(key)}: expected an integer")
        return value

    def choice(self, key: str, options: Iterable[str], default: Any = _MISSING) -> Any:
        value = self.text(key, default)
        opts = tuple(options)
        need(value is default or value in opts, f"{self.at(key)}: {value!r} is not one of {list(opts)}")
        return value

    def texts(
        self, key: str, options: Iterable[str] | None = None, *, non_empty: bool = False
    ) -> tuple[str, ...]:
        """A list of non-empty strings (each one of ``options`` when given)."""
        value = self.raw.get(key, [])
        need(isinstance(value, list), f"{self.at(key)}: expected a list")
        need(not non_empty or bool(value), f"{self.at(key)}: must not be empty")
        opts = tuple(options) if options is not None else None
        for i, item in enumerate(value):
            need(isinstance(item, str) and item != "", f"{self.at(key)}[{i}]: expected non-empty text")
            need(
                opts is None or item in opts,
                f"{self.at(key)}[{i}]: {item!r} is not one of {list(opts or ())}",
            )
        return tuple(value)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.raw.get(key, {})
        need(isinstance(value, dict), f"{self.at(key)}: expected an object")
        return dict(value)

    def items(self, key: str, build: Callable[[Any, str], T], *, non_empty: bool = False) -> tuple[T, ...]:
        """A list of objects, each built by ``build(raw, where)``."""
        value = self.raw.get(key, [])
        need(isinstance(value, list), f"{self.at(key)}: expected a list")
        need(not non_empty or bool(value), f"{self.at(key)}: must not be empty")
        return tuple(build(item, f"{self.at(key)}[{i}]") for i, item in enumerate(value))

    def regex(self, key: str, default: Any = _MISSING) -> Any:
        """A string that compiles as a Python regular expression."""
        value = self.text(key, default)
        if isinstance(value, str):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"{self.at(key)}: bad regex {value!r}: {exc}") from None
        return value
