"""The backend catalog (``probe/data/backends.json``): what each vLLM MoE / attention backend needs.

Each backend (as vLLM spells it: ``--moe-backend`` values, ``AttentionBackendEnum`` members) has
one or more *variants* (e.g. Marlin with bf16 vs fp16 activations, CUTLASS MoE for NVFP4 vs FP8),
each a list of *requirements*. A requirement names the files it needs (globs relative to
site-packages, alternatives tried in order — e.g. ``vllm/_moe_C_stable_libtorch.abi3.so`` from
vLLM 0.24 on, ``vllm/_moe_C.abi3.so`` before) and, for compiled code, a regex over the kernel entry
points those files must hold. Backends whose kernels are compiled at run time say so (``mode``:
``jit`` / ``pure-triton`` / ``python``) with the toolchain they need. The vLLM run-time gate (the
compute-capability rule vLLM applies before it even tries the kernels) is data too.

The semantics (how a requirement becomes a verdict) live in :mod:`probe.arch.backends`.
"""

from __future__ import annotations

import functools
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from probe.catalog import datafiles

Mode = Literal["compiled", "jit", "pure-triton", "python"]
_CC_RE = re.compile(r"^(\d{1,2})\.(\d)$")


def cc_to_int(cc: str) -> int:
    """'9.0' -> 90, '12.1' -> 121."""
    m = _CC_RE.match(cc)
    if not m:
        raise ValueError(f"not a compute capability: {cc!r} (expected e.g. '9.0' or '12.1')")
    return int(m.group(1)) * 10 + int(m.group(2))


class GateClause(BaseModel):
    """All given fields must hold (AND). ``majors``: capability major in the list; ``exact``: this CC
    only; ``min`` / ``max``: inclusive bounds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    majors: list[int] | None = None
    exact: str | None = None
    min: str | None = None
    max: str | None = None

    @field_validator("exact", "min", "max")
    @classmethod
    def _cc(cls, v: str | None) -> str | None:
        if v is not None:
            cc_to_int(v)
        return v

    @model_validator(mode="after")
    def _non_empty(self) -> GateClause:
        if self.majors is None and self.exact is None and self.min is None and self.max is None:
            raise ValueError("a gate clause needs at least one of majors / exact / min / max")
        return self

    def allows(self, sm: int) -> bool:
        if self.majors is not None and sm // 10 not in self.majors:
            return False
        if self.exact is not None and sm != cc_to_int(self.exact):
            return False
        if self.min is not None and sm < cc_to_int(self.min):
            return False
        return not (self.max is not None and sm > cc_to_int(self.max))


class Gate(BaseModel):
    """vLLM's run-time compute-capability gate: passes if any clause passes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    any_of: list[GateClause] = Field(min_length=1)
    text: str = Field(min_length=1, description="the rule in words, as vLLM states it")
    source: str = Field(min_length=1, description="file: function in the vLLM source")

    def allows(self, sm: int) -> bool:
        return any(c.allows(sm) for c in self.any_of)


class FileAlt(BaseModel):
    """One way the needed file can be present. ``glob`` is matched against the tail of a scanned
    path (or the member path inside a wheel); ``*`` does not cross ``/``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    glob: str = Field(min_length=1)
    versions: str | None = Field(None, description="which releases ship this path, e.g. 'vllm>=0.24'")

    @field_validator("glob")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v.startswith("/") or "**" in v:
            raise ValueError(f"file globs are relative to site-packages and use single '*' only: {v!r}")
        return v


class Requirement(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    what: str = Field(min_length=1, description="what this requirement is, in words")
    check: Literal["code", "present", "jit", "pure-triton", "python"] = Field(
        description="code: the kernels must exist as loadable device code; present: the file must exist "
        "(host-only module); jit: compiled at first use unless a prebuilt module is found; "
        "pure-triton / python: nothing compiled ahead of time"
    )
    files: list[FileAlt] = Field(default_factory=list, description="alternatives, tried in order")
    kernels: str | list[str] | None = Field(
        None,
        description="regex (re.search) over demangled or mangled kernel names; a list = alternatives "
        "the runtime dispatches between by arch (e.g. Marlin's 2-stage sm_75 vs 4-stage sm_80+ instances): "
        "the best alternative counts",
    )
    aggregate: Literal["all", "any"] = Field(
        "all",
        description="all: every matching kernel/file must load (weakest wins); "
        "any: a menu of cubins/kernels the runtime picks from (best wins)",
    )
    required: bool = True
    toolchain: str | None = Field(None, description="jit/pure-triton/python: what it needs at run time")
    if_missing: str | None = Field(None, description="what happens at run time when no file is found")
    expect: str | None = Field(None, description="observed in the reference release (for reviewers)")

    @field_validator("kernels")
    @classmethod
    def _regex(cls, v: str | list[str] | None) -> str | list[str] | None:
        for rx in [v] if isinstance(v, str) else (v or []):
            try:
                re.compile(rx)
            except re.error as exc:
                raise ValueError(f"bad kernel regex {rx!r}: {exc}") from None
        if isinstance(v, list) and not v:
            raise ValueError("an empty list of kernel regexes: use null")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Requirement:
        if self.check in ("code", "present") and not self.files:
            raise ValueError(f"requirement {self.what!r}: check={self.check} needs files")
        if self.check in ("jit", "pure-triton", "python") and not self.toolchain:
            raise ValueError(f"requirement {self.what!r}: check={self.check} needs a toolchain text")
        if self.kernels is not None and self.check not in ("code", "jit"):
            raise ValueError(f"requirement {self.what!r}: kernel patterns only apply to compiled code")
        return self

    @functools.cached_property
    def kernel_res(self) -> list[re.Pattern[str]]:
        """The kernel-name alternatives (empty: judge whole files)."""
        if self.kernels is None:
            return []
        return [re.compile(rx) for rx in ([self.kernels] if isinstance(self.kernels, str) else self.kernels)]


class Variant(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    requirements: list[Requirement] = Field(min_length=1)
    gate: Gate | None = Field(None, description="overrides the backend's gate for this variant")
    note: str | None = None


class Backend(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^(moe|attention)\.[a-z0-9_.]+$")
    kind: Literal["moe", "attention"]
    name: str = Field(min_length=1, description="as vLLM spells it (--moe-backend / --attention-backend)")
    label: str
    mode: Mode
    mla: bool = False
    gate: Gate
    variants: list[Variant] = Field(min_length=1, description="the first one is the primary variant")
    select: str | None = Field(None, description="how to pick it in vLLM (flags / env)")
    notes: list[str] = []
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> Backend:
        if not self.id.startswith(self.kind + "."):
            raise ValueError(f"backend id {self.id!r} must start with its kind {self.kind!r}")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"backend {self.id}: duplicate variant names {names}")
        if self.mode == "compiled" and not any(
            r.check == "code" for v in self.variants for r in v.requirements
        ):
            raise ValueError(f"backend {self.id}: mode=compiled but no 'code' requirement")
        return self


class BackendCatalog(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1]
    reference: dict[str, str] = Field(description="the releases the patterns were checked against")
    sources: dict[str, str]
    backends: list[Backend] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> BackendCatalog:
        ids = [b.id for b in self.backends]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"duplicate backend ids: {sorted(dup)}")
        return self

    def select(self, names: list[str] | None) -> list[Backend]:
        """Backends whose id, name or label matches one of ``names`` (case-insensitive); all if None."""
        if not names:
            return list(self.backends)
        wanted = {n.lower() for n in names}
        return [
            b for b in self.backends if b.id.lower() in wanted or b.name.lower() in wanted or b.kind in wanted
        ]


@functools.cache
def backend_catalog() -> BackendCatalog:
    return datafiles.load("backends.json", BackendCatalog)
