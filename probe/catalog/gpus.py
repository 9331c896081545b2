"""The GPU catalog (``probe/data/gpus.json``): compute capabilities, names, families, iGPU rules."""

from __future__ import annotations

import functools
import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

from probe.catalog._load import load_data_file
from probe.errors import UsageError


class Gpu(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sm: int = Field(ge=10, le=999, description="compute capability as major*10+minor, e.g. 110 for 11.0")
    names: list[str] = Field(min_length=1)
    aliases: list[str] = []
    integrated: bool = False
    unified_memory: bool = False
    memory_gib: float | None = None
    igpu_exact_sass_only: bool = False
    legacy_sm: list[int] = []
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


class GpuCatalog(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int
    sources: dict[str, str]
    families: dict[int, list[int]]
    gpus: list[Gpu]
    ptx_isa_min_driver: dict[str, str]

    @model_validator(mode="after")
    def _check(self) -> GpuCatalog:
        seen: set[int] = set()
        for gpu in self.gpus:
            if gpu.sm in seen:
                raise ValueError(f"duplicate GPU entry sm_{gpu.sm}")
            seen.add(gpu.sm)
        for fam, members in self.families.items():
            if fam not in members:
                raise ValueError(f"family {fam}f must contain its own arch")
            if any(m // 10 != fam // 10 for m in members):
                raise ValueError(f"family {fam}f spans several majors: {members}")
        return self

    def by_sm(self, sm: int) -> Gpu | None:
        return next((g for g in self.gpus if g.sm == sm), None)

    def family_members(self, sm: int) -> list[int]:
        """Compute capabilities an ``f`` target for ``sm`` runs on (unknown: same major, minor >=)."""
        if sm in self.families:
            return list(self.families[sm])
        return [g.sm for g in self.gpus if g.major == sm // 10 and g.sm >= sm] or [sm]


@functools.cache
def catalog() -> GpuCatalog:
    return load_data_file("gpus.json", GpuCatalog)


_TARGET_RE = re.compile(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)$")
_CC_RE = re.compile(r"^(\d{1,2})\.(\d)([af]?)$")


def parse_target(text: str) -> Gpu:
    """Resolve ``sm_110a`` / ``sm_90`` / ``110`` / ``11.0`` / ``thor`` / ``H100`` to a catalog GPU.

    A target is a device; any ``a``/``f`` suffix on the name is accepted and ignored (a device is
    one compute capability). Compute capabilities missing from the catalog are allowed (a GPU the
    catalog does not know yet), named ``sm_<N>``.
    """
    raw = text.strip()
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
        return cat.by_sm(sm) or Gpu(sm=sm, names=[f"sm_{sm}"], note="not in probe's GPU catalog")
    for gpu in cat.gpus:
        names = {n.lower().replace(" ", "") for n in gpu.names} | {a.lower() for a in gpu.aliases}
        if key in names:
            return gpu
    known = ", ".join(f"sm_{g.sm}" for g in cat.gpus)
    raise UsageError(f"unknown GPU target {raw!r}",
                     hint=f"use a compute capability such as sm_110a or 12.0; known: {known}")
