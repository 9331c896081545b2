"""Checked access to the numbers of a user's ``config.json``: every field probe uses is validated.

A config given with ``--model`` is the user's input, so a missing, zero, negative, fractional or
non-finite value of a field probe needs is a usage error (exit 2) that names the field — never a
``ZeroDivisionError`` / ``OverflowError`` further down, and never a silent fallback (an expert count
of ``-8`` is not "dense"). Fields probe does not read are not judged (a real Nemotron-H config
carries ``"time_step_limit": [0.0, Infinity]``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from probe.errors import UsageError

_HINT = "fix that field of the config.json (or pass a catalog model name: `probe models` lists them)"


@dataclass(frozen=True)
class Cfg:
    """One (text) config dict and where it came from, with validated getters."""

    data: dict[str, Any]
    origin: str

    def bad(self, key: str, why: str) -> UsageError:
        return UsageError(f"{self.origin}: config field {key!r} {why}", hint=_HINT)

    def raw(self, *keys: str) -> Any:
        """The first of ``keys`` present with a non-null value, unchecked (None if none)."""
        return next((self.data[k] for k in keys if self.data.get(k) is not None), None)

    def key_of(self, *keys: str) -> str | None:
        return next((k for k in keys if self.data.get(k) is not None), None)

    def checked_int(self, key: str, value: Any, minimum: int = 1) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.bad(key, f"must be an integer (got {value!r})")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.bad(key, f"must be a finite number (got {value!r})")
            if not value.is_integer():
                raise self.bad(key, f"must be a whole number (got {value!r})")
            value = int(value)
        if value < minimum:
            raise self.bad(key, f"must be >= {minimum} (got {value!r})")
        return int(value)

    def opt_int(self, *keys: str, minimum: int = 1) -> int | None:
        """The first of ``keys`` present, checked; None when none is present (or all are null)."""
        key = self.key_of(*keys)
        return None if key is None else self.checked_int(key, self.data[key], minimum)

    def need_int(self, *keys: str, minimum: int = 1) -> int:
        value = self.opt_int(*keys, minimum=minimum)
        if value is None:
            names = " / ".join(repr(k) for k in keys)
            raise UsageError(f"{self.origin}: config field {names} is missing", hint=_HINT)
        return value

    def opt_ints(self, key: str, minimum: int = 0) -> list[int] | None:
        """A list of integers (``layer_types``-style per-layer numbers), checked; None when absent."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.bad(key, f"must be a list of integers (got {type(value).__name__})")
        return [self.checked_int(f"{key}[{i}]", v, minimum) for i, v in enumerate(value)]

    def opt_texts(self, key: str) -> list[str] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.bad(key, "must be a list of text")
        return list(value)

    def opt_text(self, *keys: str) -> str | None:
        key = self.key_of(*keys)
        if key is None:
            return None
        value = self.data[key]
        if not isinstance(value, str):
            raise self.bad(key, f"must be text (got {value!r})")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        return default if value is None else bool(value)
