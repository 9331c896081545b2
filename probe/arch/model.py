"""The ``probe scan`` JSON contract (schema_version 1) as plain, slotted dataclasses.

Field names are stable: CI scripts, the backend view and ``probe.matrix`` read them. New fields
may be added; existing ones are never renamed or removed within a schema version. docs/scan.md
lists them.

These classes are what the scanner builds and writes: no validation on the hot path (a scan of
libtorch_cuda.so makes ~3,000 entries; pydantic's import and class construction alone cost more
than the scan). The same contract as pydantic v2 models, for validation and JSON Schema, lives in
:mod:`probe.arch.schema` (imported lazily: ``probe scan --schema``, tests). A few pydantic-style
helpers (``model_dump``, ``model_dump_json``, ``model_validate``) are kept so callers written
against the former pydantic classes keep working.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

SCHEMA_VERSION = 1


class _Record:
    """Mixin: JSON conversion for the dataclasses below (fields in declaration order)."""

    __slots__ = ()
    _nested: ClassVar[dict[str, type[_Record]]] = {}  # field -> class of its items / value
    _field_names: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (nested records converted too)."""
        return {name: _plain(getattr(self, name)) for name in self._field_names}

    def model_dump(self, *, mode: str = "python", exclude: set[str] | None = None) -> dict[str, Any]:
        d = self.to_dict()
        for name in exclude or ():
            d.pop(name, None)
        return d

    def model_dump_json(self, *, indent: int | None = None) -> str:
        return dumps(self, indent=indent)

    @classmethod
    def model_validate(cls, data: Any) -> Any:
        """Build from a parsed JSON object (no type checks: use :mod:`probe.arch.schema` for that).

        Unknown or missing required fields raise ``TypeError``; a non-dict raises ``TypeError``.
        """
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        kw = dict(data)
        for name, sub in cls._nested.items():
            v = kw.get(name)
            if isinstance(v, list):
                kw[name] = [sub.model_validate(x) for x in v]
            elif isinstance(v, dict) and name in cls._dict_of:  # type: ignore[attr-defined]
                kw[name] = {k: sub.model_validate(x) for k, x in v.items()}
            elif isinstance(v, dict):
                kw[name] = sub.model_validate(v)
        return cls(**kw)

    _dict_of: ClassVar[frozenset[str]] = frozenset()


def _plain(v: Any) -> Any:
    if isinstance(v, _Record):
        return v.to_dict()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _finish(cls: type[_Record]) -> type[_Record]:
    cls._field_names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    return cls


@_finish
@dataclass(slots=True, eq=True)
class Entry(_Record):
    """One piece of device code: a fatbin entry, or a bare cubin / PTX file."""

    section: str  # .nv_fatbin | __nv_relfatbin | cubin | fatbin | ptx
    container: int  # container index within the file (0 for bare files)
    kind: str  # sass | ptx | lto-ir | relocatable-ptx | tile-ir | index | old-cubin | kind-0x..
    arch: str | None  # sm_100f for SASS, compute_80 for PTX / LTO-IR; None for index
    sm: int
    suffix: str  # "" | "a" | "f"
    ptx_isa: str | None = None
    code_version: str | None = None  # SASS in a fatbin: "1.8" (= ELF ABI 8); bare cubin: EI_ABIVERSION
    compression: str | None = None  # zstd | lz4 | None
    loadable: bool = False  # False for __nv_relfatbin entries and kinds the driver does not load
    size: int = 0  # stored payload bytes (compressed size when compressed)
    uncompressed_size: int | None = None
    offset: int | None = None  # offset of the entry header (or file) in the file / wheel member
    flags: int | None = None  # raw fatbin entry flags (bare cubin: ELF e_flags)
    nested: bool = False  # described inside a concatenated (kind 0x100) entry
    identifier: str | None = None
    toolkit: str | None = None  # bare cubin: CUDA release from .note.nv.tkinfo
    kernels: list[str] | None = None  # mangled kernel entry points (--kernels only)
    kernels_error: str | None = None

    @property
    def is_code(self) -> bool:
        return self.kind in ("sass", "ptx")

    def to_dict(self) -> dict[str, Any]:  # hot: one per entry, flat
        return {name: getattr(self, name) for name in self._field_names}


@_finish
@dataclass(slots=True, eq=True)
class KernelInfo(_Record):
    name: str  # demangled name (the mangled one when demangling failed)
    mangled: str
    codes: list[str]  # loadable targets holding the kernel, e.g. ['sm_80', 'compute_80']

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "mangled": self.mangled, "codes": list(self.codes)}


@_finish
@dataclass(slots=True, eq=True)
class FileRecord(_Record):
    path: str  # absolute path, or /abs/x.whl!member/path.so for wheel members
    error: str | None = None
    size: int = 0
    kind: str = "other"  # elf | cubin | fatbin | ptx | wheel | other
    package: str | None = None
    containers: int = 0
    relocatable_containers: int = 0
    entries: list[Entry] = field(default_factory=list)
    kernels: list[KernelInfo] | None = None
    cached: bool = False  # result came from the scan cache

    _nested: ClassVar[dict[str, type[_Record]]] = {"entries": Entry, "kernels": KernelInfo}

    @property
    def has_device_code(self) -> bool:
        return bool(self.entries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "error": self.error, "size": self.size, "kind": self.kind,
            "package": self.package, "containers": self.containers,
            "relocatable_containers": self.relocatable_containers,
            "entries": [e.to_dict() for e in self.entries],
            "kernels": None if self.kernels is None else [k.to_dict() for k in self.kernels],
            "cached": self.cached,
        }


@_finish
@dataclass(slots=True, eq=True)
class Target(_Record):
    target: str  # "sm_90"
    cc: str  # "9.0"
    name: str
    source: str  # local-gpu | argument | catalog


@_finish
@dataclass(slots=True, eq=True, frozen=True)
class TargetVerdict(_Record):
    """Verdict of one file (or kernel) on one target."""

    verdict: str  # sass | sass-compatible | ptx-jit | none
    reason: str
    via: str | None = None  # the code the driver would pick, e.g. "sm_100f"
    min_driver: str | None = None  # ptx-jit: CUDA driver version that knows the PTX ISA
    containers_loadable: int | None = None  # file rows: containers with code for the target
    containers: int | None = None  # file rows: containers with loadable code in total

    def to_dict(self) -> dict[str, Any]:  # JSON key order of schema_version 1
        return {"verdict": self.verdict, "via": self.via, "reason": self.reason,
                "min_driver": self.min_driver, "containers_loadable": self.containers_loadable,
                "containers": self.containers}


@_finish
@dataclass(slots=True, eq=True)
class FileVerdict(_Record):
    """Verdicts of one file (``kernel`` None) or one kernel of it, keyed by target (``sm_90``)."""

    path: str
    targets: dict[str, TargetVerdict]
    kernel: str | None = None  # demangled kernel name for per-kernel rows

    _nested: ClassVar[dict[str, type[_Record]]] = {"targets": TargetVerdict}
    _dict_of: ClassVar[frozenset[str]] = frozenset({"targets"})

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kernel": self.kernel,
                "targets": {k: v.to_dict() for k, v in self.targets.items()}}


@_finish
@dataclass(slots=True, eq=True)
class Summary(_Record):
    files: int = 0
    with_device_code: int = 0
    errors: int = 0
    containers: int = 0
    entries: int = 0
    cached: int = 0
    packages: dict[str, int] = field(default_factory=dict)  # files scanned per package
    packages_with_device_code: dict[str, int] = field(default_factory=dict)
    seconds: float | None = None


@_finish
@dataclass(slots=True, eq=True)
class VerifyReport(_Record):
    """``--verify-with-cuobjdump`` result."""

    cuobjdump: str | None
    files_checked: int = 0
    files_agree: int = 0
    disagreements: list[dict[str, object]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)


@_finish
@dataclass(slots=True, eq=True)
class ScanReport(_Record):
    probe_version: str
    schema_version: int = SCHEMA_VERSION
    roots: list[str] = field(default_factory=list)
    files: list[FileRecord] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)
    targets: list[Target] = field(default_factory=list)
    verdicts: list[FileVerdict] = field(default_factory=list)
    verify: VerifyReport | None = None
    backends: Any = None  # --backends: the backend view, as probe.arch.backends returns it

    _nested: ClassVar[dict[str, type[_Record]]] = {
        "files": FileRecord, "summary": Summary, "targets": Target, "verdicts": FileVerdict,
        "verify": VerifyReport,
    }

    def to_dict(self) -> dict[str, Any]:  # JSON key order of schema_version 1
        # Verdict rows of many files share their per-target dicts: convert each shared dict once.
        # Per-kernel rows have their own dicts but share the (memoised) TargetVerdict objects.
        shared: dict[int, dict[str, Any]] = {}
        tvs: dict[int, dict[str, Any]] = {}
        verdicts = []
        for v in self.verdicts:
            t = shared.get(id(v.targets))
            if t is None:
                t = shared[id(v.targets)] = {}
                for k, tv in v.targets.items():
                    d = tvs.get(id(tv))
                    if d is None:
                        d = tvs[id(tv)] = tv.to_dict()
                    t[k] = d
            verdicts.append({"path": v.path, "kernel": v.kernel, "targets": t})
        return {
            "schema_version": self.schema_version,
            "probe_version": self.probe_version,
            "roots": list(self.roots),
            "files": [f.to_dict() for f in self.files],
            "summary": self.summary.to_dict(),
            "targets": [t.to_dict() for t in self.targets],
            "verdicts": verdicts,
            "verify": None if self.verify is None else self.verify.to_dict(),
            "backends": _plain(self.backends),
        }


def _default(obj: Any) -> Any:
    if isinstance(obj, _Record):
        return obj.to_dict()
    dump = getattr(obj, "model_dump", None)  # a pydantic model inside ``backends``
    if callable(dump):
        return dump(mode="json")
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def iter_json_lines(record: _Record | dict[str, Any]) -> Iterator[str]:
    """The ``lines`` layout of :func:`dumps` in pieces (write them one by one: no second copy of a
    100 MB report in memory)."""
    data = record.to_dict() if isinstance(record, _Record) else record
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


def dumps(record: _Record | dict[str, Any], *, indent: int | None = None, lines: bool = False) -> str:
    """JSON text of a record.

    ``lines``: one top-level key per line and one list item per line, each item written compactly
    by json's C encoder (readable and as fast as compact output; ``indent`` forces json's
    pure-Python encoder, ~10x slower on a 3,000-entry report).
    """
    if lines:
        return "".join(iter_json_lines(record))
    data = record.to_dict() if isinstance(record, _Record) else record
    if indent is None:
        return json.dumps(data, default=_default, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(data, default=_default, ensure_ascii=False, indent=indent)


def _verdict_lines(rows: list[Any], enc: Any) -> Iterator[str]:
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
