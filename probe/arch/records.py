"""The ``probe scan`` JSON contract (schema_version 1): the records the scanner builds and writes.

One definition. The classes are plain slotted, keyword-only dataclasses declared in JSON key order:
the scan's hot path builds and writes them with no validation (a scan of libtorch_cuda.so makes
~3,000 entries; importing pydantic alone costs more than the whole scan). Validation and the JSON
Schema come from the same classes through pydantic's ``TypeAdapter`` (:func:`validate_report`,
:func:`json_schema`), imported only when asked for (``probe scan --schema``, tests): field
descriptions and bounds sit in each field's ``metadata``, ``extra="forbid"`` in
``__pydantic_config__``, the allowed values in the ``Literal`` annotations.

Field names are stable: CI scripts, the backend view and ``probe.matrix`` read them. New fields
may be added; existing ones are never renamed or removed within a schema version. docs/scan.md
lists them. Fields added later that are often unknown (``FileRecord.package_version``,
``ScanReport.environments``) are left out of the JSON when None, so that a report that has
nothing to say there stays byte-identical to one written before they existed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

if TYPE_CHECKING:
    from pydantic import TypeAdapter

SCHEMA_VERSION = 1

Section = Literal[".nv_fatbin", "__nv_relfatbin", "cubin", "fatbin", "ptx"]
Suffix = Literal["", "a", "f"]
Compression = Literal["zstd", "lz4"]
FileKind = Literal["elf", "cubin", "fatbin", "ptx", "wheel", "other"]
TargetSource = Literal["local-gpu", "argument", "catalog"]
VerdictName = Literal["sass", "sass-compatible", "ptx-jit", "none"]

#: fields written only when not None (added after schema_version 1 was published, often unknown)
OMIT_WHEN_NONE: frozenset[str] = frozenset({"package_version", "environments"})

#: pydantic settings read by :func:`validate_report` / :func:`json_schema` (a plain dict: no import)
_FORBID: dict[str, Any] = {"extra": "forbid"}

R = TypeVar("R", bound="Record")


def _doc(text: str, **more: Any) -> dict[str, Any]:
    """``field(metadata=...)`` for a described field (pydantic turns it into ``Field(...)``)."""
    return {"description": text, **more}


class Record:
    """Mixin: JSON conversion for the dataclasses below (fields in declaration order)."""

    __slots__ = ()
    __pydantic_config__: ClassVar[dict[str, Any]] = _FORBID
    #: field -> class of its items (lists), values (dicts) or of the value itself
    _nested: ClassVar[dict[str, type[Record]]] = {}
    #: the fields of ``_nested`` that hold a dict of records (keyed by str)
    _dict_of: ClassVar[frozenset[str]] = frozenset()
    _field_names: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (nested records converted too)."""
        return {name: to_plain(getattr(self, name)) for name in self._field_names}

    @classmethod
    def from_dict(cls: type[R], data: Any) -> R:
        """Build from a parsed JSON object written by :meth:`to_dict` (the scan cache) — no type
        checks: :func:`validate_report` checks. Unknown or missing fields, or a non-dict, raise
        ``TypeError``."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        kw = dict(data)
        for name, sub in cls._nested.items():
            v = kw.get(name)
            if isinstance(v, list):
                kw[name] = [sub.from_dict(x) for x in v]
            elif isinstance(v, dict) and name in cls._dict_of:
                kw[name] = {k: sub.from_dict(x) for k, x in v.items()}
            elif isinstance(v, dict):
                kw[name] = sub.from_dict(v)
        return cls(**kw)


def to_plain(v: Any) -> Any:
    """``v`` with every record in it converted to a dict (lists and dicts walked)."""
    if isinstance(v, Record):
        return v.to_dict()
    if isinstance(v, list):
        return [to_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: to_plain(x) for k, x in v.items()}
    return v


def _finish(cls: type[R]) -> type[R]:
    cls._field_names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    return cls


@_finish
@dataclass(slots=True, eq=True, kw_only=True)
class Entry(Record):
    """One piece of device code: a fatbin entry, or a bare cubin / PTX file."""

    section: Section
    container: int = field(metadata=_doc("container index within the file (0 for bare files)", ge=0))
    #: sass | ptx | lto-ir | relocatable-ptx | tile-ir | index | old-cubin | kind-0x..
    kind: str
    arch: str | None = field(metadata=_doc("sm_100f for SASS, compute_80 for PTX / LTO-IR; None for index"))
    sm: int
    suffix: Suffix
    ptx_isa: str | None = None
    code_version: str | None = field(
        default=None,
        metadata=_doc(
            "SASS: cubin code version from the fatbin header ('1.8' = ELF ABI 8); "
            "bare cubin: its EI_ABIVERSION"
        ),
    )
    compression: Compression | None = None
    loadable: bool = field(
        metadata=_doc(
            "False for __nv_relfatbin entries and kinds the driver does not load (LTO-IR, index, ...)"
        )
    )
    size: int = field(metadata=_doc("stored payload bytes (compressed size when compressed)"))
    uncompressed_size: int | None = None
    offset: int | None = field(
        default=None, metadata=_doc("offset of the entry header (or file) in the file / wheel member")
    )
    flags: int | None = field(default=None, metadata=_doc("raw fatbin entry flags (bare cubin: ELF e_flags)"))
    nested: bool = field(default=False, metadata=_doc("described inside a concatenated (kind 0x100) entry"))
    identifier: str | None = None
    toolkit: str | None = field(default=None, metadata=_doc("bare cubin: CUDA release from .note.nv.tkinfo"))
    kernels: list[str] | None = field(
        default=None,
        metadata=_doc("mangled kernel entry points (--kernels only; None when not read or not applicable)"),
    )
    kernels_error: str | None = None

    def to_dict(self) -> dict[str, Any]:  # hot: one per entry, flat
        return {name: getattr(self, name) for name in self._field_names}


@_finish
@dataclass(slots=True, eq=True, kw_only=True)
class KernelInfo(Record):
    name: str = field(metadata=_doc("demangled name (the mangled one when demangling failed)"))
    mangled: str
    codes: list[str] = field(
        metadata=_doc("loadable targets holding the kernel, e.g. ['sm_80', 'compute_80']")
    )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "mangled": self.mangled, "codes": list(self.codes)}


@_finish
@dataclass(slots=True, eq=True, kw_only=True)
class FileRecord(Record):
    path: str = field(metadata=_doc("absolute path, or /abs/x.whl!member/path.so for wheel members"))
    error: str | None = None
    size: int = 0
    kind: FileKind = "other"
    package: str | None = None
    package_version: str | None = field(
        default=None,
        metadata=_doc(
            "version of the distribution named `package`, from the *.dist-info folder of the "
            "site-packages folder holding the file (or the wheel's file name); the key is left out "
            "when not known"
        ),
    )
    containers: int = 0
    relocatable_containers: int = 0
    entries: list[Entry] = field(default_factory=list)
    kernels: list[KernelInfo] | None = None
    cached: bool = field(default=False, metadata=_doc("result came from the scan cache"))

    _nested: ClassVar[dict[str, type[Record]]] = {"entries": Entry, "kernels": KernelInfo}

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "path": self.path,
            "error": self.error,
            "size": self.size,
            "kind": self.kind,
            "package": self.package,
        }
        if self.package_version is not None:  # left out when unknown: older reports unchanged
            d["package_version"] = self.package_version
        d.update(
            containers=self.containers,
            relocatable_containers=self.relocatable_containers,
            entries=[e.to_dict() for e in self.entries],
            kernels=None if self.kernels is None else [k.to_dict() for k in self.kernels],
            cached=self.cached,
        )
        return d


@_finish
@dataclass(slots=True, eq=True, kw_only=True)
class Target(Record):
    target: str  # "sm_90"
    cc: str  # "9.0"
    name: str
    source: TargetSource


@_finish
@dataclass(slots=True, eq=True, frozen=True, kw_only=True)
class TargetVerdict(Record):
    """Verdict of one file (or kernel) on one target."""

    verdict: VerdictName
    via: str | None = None  # the code the driver would pick, e.g. "sm_100f"
    reason: str
    min_driver: str | None = None  # ptx-jit: CUDA driver version that knows the PTX ISA
    containers_loadable: int | None = None  # file rows: containers with code for the target
    containers: int | None = None  # file rows: containers with loadable code in total


@_finish
@dataclass(slots=True, eq=True, kw_only=True)
class FileVerdict(Record):
    """Verdicts of one file (``kernel`` None) or one kernel of it, keyed by target (``sm_90``)."""

    path: str
    kernel: str | None = None  # demangled kernel name for per-kernel rows
    targets: dict[str, TargetVerdict]

    _nested: ClassVar[dict[str, type[Record]]] = {"targets": TargetVerdict}
    _dict_of: ClassVar[frozenset[str]] = frozenset({"targets"})

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kernel": self.kernel,
            "targets": {k: v.to_dict() for k, v in self.targets.items()},
        }


@_finish
@dataclass(slots=True, eq=True, kw_only=True)
class Summary(Record):
    files: int = 0
    with_device_code: int = 0
    errors: int = 0
    containers: int = 0
    entries: int = 0
    cached: int = 0
    packages: dict[str, int] = field(default_factory=dict, metadata=_doc("files scanned per package"))
    packages_with_device_code: dict[str, int] = field(default_factory=dict)
    seconds: float | None = None


@_finish
@dataclass(slots=True, eq=True, kw_only=True)
class VerifyReport(Record):
    """``--verify-with-cuobjdump`` result."""

    cuobjdump: str | None
    files_checked: int = 0
    files_agree: int = 0
    disagreements: list[dict[str, object]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)


@_finish
@dataclass(slots=True, eq=True, kw_only=True)
class Environment(Record):
    """A Python environment found in an image input: one site-packages / dist-packages folder."""

    site: str = field(
        metadata=_doc("the folder, as IMAGE!/usr/lib/python3.12/site-packages (the path form of files)")
    )
    packages: dict[str, str | None] = field(
        default_factory=dict,
        metadata=_doc("distribution -> version, from the *.dist-info folder names (None: no version)"),
    )

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "packages": dict(self.packages)}


@_finish
@dataclass(slots=True, eq=True, kw_only=True)
class ScanReport(Record):
    schema_version: int = SCHEMA_VERSION
    probe_version: str
    roots: list[str] = field(default_factory=list)
    environments: list[Environment] | None = field(
        default=None,
        metadata=_doc(
            "image inputs: the Python environments found in the image (every site-packages / "
            "dist-packages folder); the key is left out when no image was scanned"
        ),
    )
    files: list[FileRecord] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)
    targets: list[Target] = field(default_factory=list)
    verdicts: list[FileVerdict] = field(default_factory=list)
    verify: VerifyReport | None = None
    backends: Any = field(
        default=None, metadata=_doc("--backends: the backend view, as probe.arch.backend_view returns it")
    )

    _nested: ClassVar[dict[str, type[Record]]] = {
        "environments": Environment,
        "files": FileRecord,
        "summary": Summary,
        "targets": Target,
        "verdicts": FileVerdict,
        "verify": VerifyReport,
    }

    def to_dict(self) -> dict[str, Any]:  # JSON key order of schema_version 1
        d: dict[str, Any] = {
            "schema_version": self.schema_version,
            "probe_version": self.probe_version,
            "roots": list(self.roots),
        }
        if self.environments is not None:  # left out without image inputs: older reports unchanged
            d["environments"] = [e.to_dict() for e in self.environments]
        d.update(
            files=[f.to_dict() for f in self.files],
            summary=self.summary.to_dict(),
            targets=[t.to_dict() for t in self.targets],
            verdicts=_verdict_dicts(self.verdicts),
            verify=None if self.verify is None else self.verify.to_dict(),
            backends=to_plain(self.backends),
        )
        return d


def _verdict_dicts(verdicts: list[FileVerdict]) -> list[dict[str, Any]]:
    """Verdict rows as dicts. Rows of many files share their per-target dicts: convert each shared
    dict once. Per-kernel rows have their own dicts but share the (memoised) TargetVerdict objects."""
    shared: dict[int, dict[str, Any]] = {}
    tvs: dict[int, dict[str, Any]] = {}
    out = []
    for v in verdicts:
        t = shared.get(id(v.targets))
        if t is None:
            t = shared[id(v.targets)] = {}
            for k, tv in v.targets.items():
                d = tvs.get(id(tv))
                if d is None:
                    d = tvs[id(tv)] = tv.to_dict()
                t[k] = d
        out.append({"path": v.path, "kernel": v.kernel, "targets": t})
    return out


# ----------------------------------------------------------------------------------------------
# validation and JSON Schema (pydantic, imported here only)


@functools.cache
def _adapter() -> TypeAdapter[ScanReport]:
    from pydantic import TypeAdapter

    return TypeAdapter(ScanReport)


def validate_report(data: dict[str, Any] | str | bytes) -> ScanReport:
    """Validate a ``probe scan --json`` document (parsed or raw JSON) against the contract.

    Raises ``pydantic.ValidationError``; returns the records."""
    if isinstance(data, (str, bytes)):
        return _adapter().validate_json(data)
    return _adapter().validate_python(data)


def json_schema() -> dict[str, Any]:
    """JSON Schema of the ``probe scan --json`` document."""
    return _adapter().json_schema()
