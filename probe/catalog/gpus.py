"""The GPU catalog (``probe/data/gpus.json``): compute capabilities, names, families, iGPU rules.

Frozen dataclasses, read with :mod:`json` and validated by hand rather than with pydantic: ``probe
scan`` and ``probe recommend`` consult the catalog on their start-up paths, and building pydantic models
there costs more than a header scan of libtorch_cuda.so. A malformed file raises :class:`DataFileError`
(a bug in probe).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from probe.errors import DataFileError, UsageError

_GPU_FIELDS = {
    "sm",
    "names",
    "aliases",
    "integrated",
    "unified_memory",
    "memory_gib",
    "igpu_exact_sass_only",
    "legacy_sm",
    "note",
}
_TOP_FIELDS = {"schema_version", "sources", "families", "gpus", "ptx_isa_min_driver"}


@dataclass(frozen=True)
class Gpu:
    sm: int  # compute capability as major*10+minor, e.g. 110 for 11.0
    names: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    integrated: bool = False
    unified_memory: bool = False
    memory_gib: float | None = None
    igpu_exact_sass_only: bool = False  # Jetson iGPUs: dGPU SASS of the same major does not load
    legacy_sm: tuple[int, ...] = ()  # earlier names of this CC (Thor: 101 before CUDA 13)
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


@dataclass(frozen=True)
class GpuCatalog:
    schema_version: int
    sources: dict[str, str]
    families: dict[int, list[int]]
    gpus: tuple[Gpu, ...]
    ptx_isa_min_driver: dict[str, str] = field(default_factory=dict)

    def by_sm(self, sm: int) -> Gpu | None:
        return next((g for g in self.gpus if g.sm == sm), None)

    def family_members(self, sm: int) -> list[int]:
        """Compute capabilities an ``f`` target for ``sm`` runs on (unknown: same major, minor >=)."""
        if sm in self.families:
            return list(self.families[sm])
        return [g.sm for g in self.gpus if g.major == sm // 10 and g.sm >= sm] or [sm]


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


def _strs(value: Any, what: str) -> tuple[str, ...]:
    _check(isinstance(value, list) and all(isinstance(x, str) and x for x in value), f"{what}: list of names")
    return tuple(value)


def _ints(value: Any, what: str) -> tuple[int, ...]:
    _check(isinstance(value, list) and all(type(x) is int for x in value), f"{what}: list of integers")
    return tuple(value)


def _gpu(raw: Any) -> Gpu:
    _check(isinstance(raw, dict), "each GPU is an object")
    _check(not (set(raw) - _GPU_FIELDS), f"unknown GPU fields {sorted(set(raw) - _GPU_FIELDS)}")
    sm = raw.get("sm")
    _check(type(sm) is int and 10 <= sm <= 999, f"sm {sm!r} is not a compute capability")
    names = _strs(raw.get("names"), f"sm_{sm} names")
    _check(bool(names), f"sm_{sm}: at least one name")
    flags = {k: raw.get(k, False) for k in ("integrated", "unified_memory", "igpu_exact_sass_only")}
    _check(all(isinstance(v, bool) for v in flags.values()), f"sm_{sm}: flags are booleans")
    mem, note = raw.get("memory_gib"), raw.get("note")
    _check(mem is None or (isinstance(mem, (int, float)) and mem > 0), f"sm_{sm}: memory_gib")
    _check(note is None or isinstance(note, str), f"sm_{sm}: note is text")
    return Gpu(
        sm=sm,
        names=names,
        aliases=_strs(raw.get("aliases", []), f"sm_{sm} aliases"),
        memory_gib=mem,
        legacy_sm=_ints(raw.get("legacy_sm", []), f"sm_{sm} legacy_sm"),
        note=note,
        **flags,
    )


def validate(raw: Any) -> GpuCatalog:
    """Build the catalog from the parsed JSON, raising ValueError on anything malformed."""
    _check(isinstance(raw, dict), "top level is an object")
    _check(not (set(raw) - _TOP_FIELDS), f"unknown fields {sorted(set(raw) - _TOP_FIELDS)}")
    _check(raw.get("schema_version") == 1, "schema_version must be 1")
    gpus = tuple(_gpu(g) for g in raw.get("gpus") or [])
    _check(bool(gpus), "no GPUs")
    _check(len({g.sm for g in gpus}) == len(gpus), "duplicate GPU entry")
    fams_raw = raw.get("families")
    _check(isinstance(fams_raw, dict), "families is an object")
    families: dict[int, list[int]] = {}
    for key, members in fams_raw.items():
        _check(str(key).isdigit(), f"family key {key!r}")
        fam = int(key)
        members = list(_ints(members, f"family {fam}f"))
        _check(fam in members, f"family {fam}f must contain its own arch")
        _check(all(m // 10 == fam // 10 for m in members), f"family {fam}f spans several majors")
        families[fam] = members
    ptx = raw.get("ptx_isa_min_driver") or {}
    _check(isinstance(ptx, dict) and all(isinstance(v, str) for v in ptx.values()), "ptx_isa_min_driver")
    sources = raw.get("sources") or {}
    _check(isinstance(sources, dict), "sources is an object")
    return GpuCatalog(
        schema_version=1, sources=dict(sources), families=families, gpus=gpus, ptx_isa_min_driver=dict(ptx)
    )


@functools.cache
def catalog() -> GpuCatalog:
    from probe.catalog import datafiles

    try:
        return validate(datafiles.read_json("gpus.json"))
    except ValueError as exc:
        raise DataFileError(f"packaged data file probe/data/gpus.json is invalid: {exc}") from exc


_TARGET_RE = re.compile(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)$")
_CC_RE = re.compile(r"^(\d{1,2})\.(\d)([af]?)$")


def parse_target(text: str, *, known_only: bool = False) -> Gpu:
    """Resolve ``sm_110a`` / ``sm_90`` / ``110`` / ``11.0`` / ``thor`` / ``H100`` to a catalog GPU.

    A target is a device; any ``a``/``f`` suffix on the name is accepted and ignored (a device is
    one compute capability). Compute capabilities missing from the catalog are allowed (a GPU the
    catalog does not know yet, e.g. for ``probe scan``), named ``sm_<N>`` — unless ``known_only``
    (``probe recommend``: nothing is known of such a GPU), which refuses them with the closest names.
    """
    raw = text.strip()
    if not raw:
        raise UsageError(
            "empty GPU name", hint=f"use a compute capability such as sm_110a; known: {_known()}"
        )
    key = raw.lower().replace(" ", "")
    sm: int | None = None
    if m := _TARGET_RE.match(key):
        sm = int(m.group(1))
    elif m := _CC_RE.match(key):
        sm = int(m.group(1)) * 10 + int(m.group(2))
    cat = catalog()
    if sm is not None:
        if sm < 30 or sm % 10 > 9:
            raise UsageError(f"not a CUDA compute capability: {raw!r}")
        gpu = cat.by_sm(sm)
        if gpu is None and known_only:
            raise UsageError(f"no GPU of compute capability sm_{sm} in probe's catalog", hint=_closest(sm))
        return gpu or Gpu(sm=sm, names=(f"sm_{sm}",), note="not in probe's GPU catalog")
    for gpu in cat.gpus:
        names = {n.lower().replace(" ", "") for n in gpu.names} | {a.lower() for a in gpu.aliases}
        if key in names:
            return gpu
    raise UsageError(
        f"unknown GPU target {raw!r}",
        hint=f"use a compute capability such as sm_110a or 12.0; known: {_known()}",
    )


def _known() -> str:
    return ", ".join(f"sm_{g.sm}" for g in catalog().gpus)


def _closest(sm: int) -> str:
    """The catalog's GPUs nearest in compute capability, with their names."""
    near = sorted(catalog().gpus, key=lambda g: (abs(g.sm - sm), g.sm))[:3]
    return "closest: " + "; ".join(f"sm_{g.sm} ({', '.join(g.names[:2])})" for g in near)
