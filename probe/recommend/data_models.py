"""Pydantic models of the data files the fast ``recommend`` path reads as plain JSON.

``recommend`` must start in well under 0.2 s, so it does not import pydantic; these models validate
``probe/data/vllm_flags.json`` (and, through :mod:`probe.catalog.report_schema`, ``probe/data/reports.json``)
in the test suite (``tests/matrix/test_data_files.py``) and on demand (``python3 -m
probe.recommend.data_models``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from probe.catalog import datafiles
from probe.catalog.quants import QUANTS, Quant
from probe.catalog.report_schema import ReportsFile

_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def _version(v: str | None) -> str | None:
    if v is not None and not _VERSION.match(v):
        raise ValueError(f"not a vLLM version: {v!r}")
    return v


class FlagSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: str
    args: list[str] = Field(min_length=2)
    alt: str | None = None
    versions: dict[Literal["2", "3", "4"], str] = {}

    _v = field_validator("since")(_version)


class EnvSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: str | None = None
    until: str | None = None
    replacement: str | None = None

    _v = field_validator("since", "until")(_version)


class MoeBackendSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: str
    quants: list[Quant] = Field(min_length=1)
    min_sm: dict[Quant, int] = {}
    last_resort: bool = False
    platform: Literal["cuda", "rocm"] = "cuda"
    expert_parallel_only: bool = False
    note: str | None = None

    _v = field_validator("since")(_version)


class SinceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: str

    _v = field_validator("since")(_version)


class FlagsData(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1]
    sources: dict[str, str]
    moe_backend_flag: FlagSpec
    attention_backend_flag: FlagSpec
    fa_version_flag: FlagSpec
    env: dict[str, EnvSpec]
    env_era_moe: dict[str, Any]
    moe_backends: dict[str, MoeBackendSpec]
    attention_backends: dict[str, SinceSpec]
    auto_priority: dict[str, Any]
    latest_known: str

    @field_validator("env_era_moe")
    @classmethod
    def _env_era(cls, v: dict[str, Any]) -> dict[str, Any]:
        for quant, table in v.items():
            if quant == "about":
                continue
            if quant not in QUANTS:
                raise ValueError(f"env_era_moe: unknown quant {quant!r}")
            for backend, env in table.items():
                if not all(
                    isinstance(k, str) and k.startswith("VLLM_") and isinstance(x, str)
                    for k, x in env.items()
                ):
                    raise ValueError(f"env_era_moe.{quant}.{backend}: expected VLLM_* -> string")
        return v


def _read(name: str) -> Any:
    return datafiles.read_json(name)


def validate_packaged_data() -> tuple[FlagsData, ReportsFile]:
    return FlagsData.model_validate(_read("vllm_flags.json")), ReportsFile.model_validate(
        _read("reports.json")
    )


if __name__ == "__main__":
    flags, reported = validate_packaged_data()
    print(f"vllm_flags.json: {len(flags.moe_backends)} MoE backends; reports.json: {len(reported.reports)}")
