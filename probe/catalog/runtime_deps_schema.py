"""The pydantic model of ``probe/data/runtime_deps.json`` (validated at load by ``probe run`` and
the tests; ``probe recommend`` reads the file as plain JSON through :mod:`probe.catalog.runtime_deps`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DepList = list[str] | Literal["*"]


class ImportSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    install: str = Field(min_length=1, description="the distribution to install")
    module: str = Field(min_length=1, description="the module whose import fails without it")
    provenance: str = Field(min_length=1, description="the provenance.versions field that records it")


class DepsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1]
    about: str
    components: dict[str, list[str]]
    always: list[str]
    cells: dict[str, DepList]
    moe: dict[str, DepList]
    attention: dict[str, DepList]
    imports: dict[str, ImportSpec]

    @model_validator(mode="after")
    def _known_components(self) -> DepsFile:
        named = set(self.always) | set(self.imports)
        for table in (self.cells, self.moe, self.attention):
            named.update(c for v in table.values() if v != "*" for c in v)
        unknown_names = named - set(self.components)
        if unknown_names:
            raise ValueError(f"components used but not defined: {sorted(unknown_names)}")
        return self
