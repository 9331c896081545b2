"""A pydantic-free view of the GPU catalog (``probe/data/gpus.json``) for the scanner's start-up.

``probe scan`` must start fast: importing pydantic and building the catalog models costs more
than scanning libtorch_cuda.so. This module reads the same packaged file with :mod:`json` and
gives duck-typed equivalents of :class:`probe.catalog.gpus.Gpu` / ``GpuCatalog`` (same attribute
names: ``sm``, ``names``, ``aliases``, ``integrated``, ``igpu_exact_sass_only``, ``legacy_sm``,
``major``, ``minor``, ``cc``, ``label``; ``families``, ``gpus``, ``ptx_isa_min_driver``,
``by_sm``, ``family_members``) and the same :func:`parse_target` semantics. The validated
catalog (:func:`probe.catalog.gpus.catalog`) stays the source of truth: ``tests/arch/
test_schema.py`` checks that both read the same data and resolve targets the same way.
"""

# ruff: noqa: PTH100, PTH118, PTH120

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from probe.errors import DataFileError, UsageError


@dataclass(frozen=True, slots=True)
class LeanGpu:
    sm: int
    names: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    integrated: bool = False
    unified_memory: bool = False
    memory_gib: float | None = None
    igpu_exact_sass_only: bool = False
    legacy_sm: tuple[int, ...] = ()
    note: str | None = None

    @property
    def major(self) -> int:
        return self.sm // 10

    @property
    def minor(self) -> int:
        return self.sm % 10

    @property
    def cc(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def label(self) -> str:
        return f"sm_{self.sm}"


@dataclass(frozen=True, slots=True)
class LeanCatalog:
    families: dict[int, list[int]]
    gpus: tuple[LeanGpu, ...]
    ptx_isa_min_driver: dict[str, str]

    def by_sm(self, sm: int) -> LeanGpu | None:
        return next((g for g in self.gpus if g.sm == sm), None)

    def family_members(self, sm: int) -> list[int]:
        """Compute capabilities an ``f`` target for ``sm`` runs on (unknown: same major, minor >=)."""
        if sm in self.families:
            return list(self.families[sm])
        return [g.sm for g in self.gpus if g.major == sm // 10 and g.sm >= sm] or [sm]


def _read_data() -> dict[str, Any]:
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "gpus.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:  # e.g. a zipped install: go through importlib.resources
        from importlib import resources

        return json.loads(resources.files("probe.data").joinpath("gpus.json").read_text(encoding="utf-8"))


@functools.cache
def lean_catalog() -> LeanCatalog:
    """The GPU catalog without pydantic (a malformed file: DataFileError, as the validated loader)."""
    try:
        raw = _read_data()
        gpus = tuple(
            LeanGpu(
                sm=int(g["sm"]),
                names=tuple(g["names"]),
                aliases=tuple(g.get("aliases", ())),
                integrated=bool(g.get("integrated", False)),
                unified_memory=bool(g.get("unified_memory", False)),
                memory_gib=g.get("memory_gib"),
                igpu_exact_sass_only=bool(g.get("igpu_exact_sass_only", False)),
                legacy_sm=tuple(int(x) for x in g.get("legacy_sm", ())),
                note=g.get("note"),
            )
            for g in raw["gpus"]
        )
        families = {int(k): [int(x) for x in v] for k, v in raw["families"].items()}
        cat = LeanCatalog(families=families, gpus=gpus, ptx_isa_min_driver=dict(raw["ptx_isa_min_driver"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataFileError(f"packaged data file probe/data/gpus.json is invalid: {exc}") from exc
    if len({g.sm for g in gpus}) != len(gpus) or any(not g.names for g in gpus):
        raise DataFileError("packaged data file probe/data/gpus.json is invalid: duplicate sm or no names")
    return cat


_TARGET_RE = re.compile(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)$")
_CC_RE = re.compile(r"^(\d{1,2})\.(\d)([af]?)$")


def parse_target(text: str) -> LeanGpu:
    """Same as :func:`probe.catalog.gpus.parse_target`, on the lean catalog."""
    raw = text.strip()
    key = raw.lower().replace(" ", "")
    sm: int | None = None
    if m := _TARGET_RE.match(key):
        sm = int(m.group(1))
    elif m := _CC_RE.match(key):
        sm = int(m.group(1)) * 10 + int(m.group(2))
    cat = lean_catalog()
    if sm is not None:
        if sm < 30 or sm % 10 > 9:
            raise UsageError(f"not a CUDA compute capability: {raw!r}")
        return cat.by_sm(sm) or LeanGpu(sm=sm, names=(f"sm_{sm}",), note="not in probe's GPU catalog")
    for gpu in cat.gpus:
        names = {n.lower().replace(" ", "") for n in gpu.names} | {a.lower() for a in gpu.aliases}
        if key in names:
            return gpu
    known = ", ".join(f"sm_{g.sm}" for g in cat.gpus)
    raise UsageError(
        f"unknown GPU target {raw!r}",
        hint=f"use a compute capability such as sm_110a or 12.0; known: {known}",
    )
