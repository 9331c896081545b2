"""The ``probe scan`` JSON contract (schema_version 1) as pydantic v2 models: validation and JSON Schema.

The scanner itself builds the plain dataclasses of :mod:`probe.arch.model` (same class and field
names; importing pydantic and building these classes costs ~0.2 s, more than a whole scan of
libtorch_cuda.so). This module is imported only where validation or the schema is wanted:
``probe scan --schema``, :func:`validate_report`, tests that check real output against the contract.
``tests/arch/test_schema.py`` checks that both definitions list the same fields.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from probe.arch.model import SCHEMA_VERSION

EntryKind = str  # "sass", "ptx", "lto-ir", "relocatable-ptx", "tile-ir", "index", "kind-0x.."
FileKind = Literal["elf", "cubin", "fatbin", "ptx", "wheel", "other"]
VerdictName = Literal["sass", "sass-compatible", "ptx-jit", "none"]


class Entry(BaseModel):
    """One piece of device code: a fatbin entry, or a bare cubin / PTX file."""

    model_config = ConfigDict(extra="forbid")

    section: Literal[".nv_fatbin", "__nv_relfatbin", "cubin", "fatbin", "ptx"]
    container: int = Field(ge=0, description="container index within the file (0 for bare files)")
    kind: EntryKind
    arch: str | None = Field(description="sm_100f for SASS, compute_80 for PTX / LTO-IR; None for index")
    sm: int
    suffix: Literal["", "a", "f"]
    ptx_isa: str | None = None
    code_version: str | None = Field(
        None,
        description="SASS: cubin code version from the fatbin "
        "header ('1.8' = ELF ABI 8); bare cubin: its EI_ABIVERSION",
    )
    compression: Literal["zstd", "lz4"] | None = None
    loadable: bool = Field(
        description="False for __nv_relfatbin entries and kinds the driver does not load (LTO-IR, index, ...)"
    )
    size: int = Field(description="stored payload bytes (compressed size when compressed)")
    uncompressed_size: int | None = None
    offset: int | None = Field(
        None, description="offset of the entry header (or file) in the file / wheel member"
    )
    flags: int | None = Field(None, description="raw fatbin entry flags")
    nested: bool = Field(False, description="described inside a concatenated (kind 0x100) entry")
    identifier: str | None = None
    toolkit: str | None = Field(None, description="bare cubin: CUDA release from .note.nv.tkinfo")
    kernels: list[str] | None = Field(
        None, description="mangled kernel entry points (--kernels only; None when not read or not applicable)"
    )
    kernels_error: str | None = None

    @property
    def is_code(self) -> bool:
        return self.kind in ("sass", "ptx")


class KernelInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="demangled name (the mangled one when demangling failed)")
    mangled: str
    codes: list[str] = Field(description="loadable targets holding the kernel, e.g. ['sm_80', 'compute_80']")


class FileRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="absolute path, or /abs/x.whl!member/path.so for wheel members")
    error: str | None = None
    size: int = 0
    kind: FileKind = "other"
    package: str | None = None
    containers: int = 0
    relocatable_containers: int = 0
    entries: list[Entry] = Field(default_factory=list)
    kernels: list[KernelInfo] | None = None
    cached: bool = Field(False, description="result came from the scan cache")

    @property
    def has_device_code(self) -> bool:
        return bool(self.entries)


class Target(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str  # "sm_90"
    cc: str  # "9.0"
    name: str
    source: Literal["local-gpu", "argument", "catalog"]


class TargetVerdict(BaseModel):
    """Verdict of one file (or kernel) on one target."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verdict: VerdictName
    via: str | None = None  # the code the driver would pick, e.g. "sm_100f"
    reason: str
    min_driver: str | None = None  # ptx-jit: CUDA driver version that knows the PTX ISA
    containers_loadable: int | None = None  # file rows: containers with code for the target
    containers: int | None = None  # file rows: containers with loadable code in total


class FileVerdict(BaseModel):
    """Verdicts of one file (``kernel`` None) or one kernel of it, keyed by target (``sm_90``)."""

    model_config = ConfigDict(extra="forbid")

    path: str
    kernel: str | None = None  # demangled kernel name for per-kernel rows
    targets: dict[str, TargetVerdict]


class Summary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    files: int = 0
    with_device_code: int = 0
    errors: int = 0
    containers: int = 0
    entries: int = 0
    cached: int = 0
    packages: dict[str, int] = Field(default_factory=dict, description="files scanned per package")
    packages_with_device_code: dict[str, int] = Field(default_factory=dict)
    seconds: float | None = None


class VerifyReport(BaseModel):
    """``--verify-with-cuobjdump`` result."""

    model_config = ConfigDict(extra="forbid")

    cuobjdump: str | None
    files_checked: int = 0
    files_agree: int = 0
    disagreements: list[dict[str, object]] = []
    errors: list[dict[str, str]] = []


class ScanReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    probe_version: str
    roots: list[str] = []
    files: list[FileRecord] = []
    summary: Summary = Field(default_factory=Summary)
    targets: list[Target] = []
    verdicts: list[FileVerdict] = []
    verify: VerifyReport | None = None
    backends: Any = Field(None, description="--backends: the backend view, as probe.arch.backends returns it")


def validate_report(data: dict[str, Any] | str | bytes) -> ScanReport:
    """Validate a ``probe scan --json`` document (parsed or raw JSON) against the contract."""
    if isinstance(data, (str, bytes)):
        return ScanReport.model_validate_json(data)
    return ScanReport.model_validate(data)


def json_schema() -> dict[str, Any]:
    """JSON Schema of the ``probe scan --json`` document."""
    return ScanReport.model_json_schema()
