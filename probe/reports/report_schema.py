"""The pydantic model of a field-report file (``probe/data/reports.json``, users' ``--reports`` files).

The field types are declared here (they give the JSON Schema and the docs); every rule beyond the
types — vocabularies, URLs, dates, version ranges, one-line log lines, unique ids and threads — is
:mod:`probe.reports.rules`, the one set of checks the fast reader applies as well.
``validated()`` loads the packaged file through :func:`probe.catalog.datafiles.load`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from probe.catalog import datafiles
from probe.reports.rules import header_problems, report_problems, uniqueness_problems

Outcome = Literal[
    "ok", "wrong_output", "unsupported", "no_kernel_image", "jit_failed", "import_error", "api_mismatch",
    "kernel_init_failed", "device_fault", "oom", "timeout", "crashed", "degraded",
]  # fmt: skip
Stack = Literal[
    "vllm", "flashinfer", "deep_gemm", "sglang", "tensorrt_llm", "flash_attn", "flashmla", "cutlass", "other"
]
Kind = Literal["moe", "attention", "engine", "gemm", "sampler", "comm", "compile", "other"]


class WorkaroundModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    flags: list[str] = Field(default_factory=list, description="vLLM flags that made it work")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables that made it work")
    note: str | None = None


class ReportModel(BaseModel):
    """One report: what failed (or worked), where, at which versions, and how it was checked."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="unique slug, e.g. vllm-28145-sm120-cutlass-moe-garbage")
    source: str | None = Field(
        default=None, description="https URL of the thread read (null only with a citation)"
    )
    also: list[str] = Field(default_factory=list, description="related threads / fix PRs")
    citation: str | None = Field(default=None, description="where the facts come from, when no URL")
    date: str = Field(description="date of the report: YYYY-MM-DD (YYYY-MM / YYYY when no day is given)")
    seen_in: Stack = Field(description="the software stack it was seen in")
    gpus: list[int] = Field(min_length=1, description="compute capabilities it was seen on (120 = sm_120)")
    gpu_names: list[str] = Field(default_factory=list)
    kind: Kind
    backend: str = Field(description="probe's name: --moe-backend value, attention enum name, gemm kernel …")
    fa_version: Literal[2, 3, 4] | None = None
    quant: str | None = Field(default=None, description="null: any / not stated")
    features: dict[str, bool | int | str] = Field(default_factory=dict)
    models: list[str] = Field(default_factory=list, description="models it was seen on")
    model_specific: bool = Field(default=False, description="applies only to the models named")
    versions: dict[str, list[str]] = Field(default_factory=dict, description="exact versions it was seen on")
    versions_text: str | None = Field(default=None, description="versions not exact enough for a range")
    introduced_in: dict[str, str] | None = None
    fixed_in: dict[str, str] | None = Field(default=None, description="first release with the fix, and/or pr")
    last_affected: dict[str, str] | None = Field(
        default=None, description="the last release known affected, per package (OSV's last_affected)"
    )
    open_as_of: str | None = Field(default=None, description="date it was still unfixed (failures not fixed)")
    outcome: Outcome
    symptom: str
    root_cause: str
    workaround: WorkaroundModel | None = None
    works_with: list[str] = Field(default_factory=list, description="backends of the same kind that worked")
    log_line: str | None = Field(default=None, description="the decisive log line, verbatim, one line")
    checked: str = Field(description="how the facts were checked (thread read, fix PR, release notes)")
    phase: str | None = None
    exit_code: int | None = None
    shape: dict[str, int] | None = None
    timings: dict[str, float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _rules(cls, data: Any) -> Any:
        problems = report_problems(data)
        if problems:
            raise ValueError("; ".join(problems))
        return data


class ReportsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[3]
    about: str | None = None
    reports: list[ReportModel]

    @model_validator(mode="before")
    @classmethod
    def _file_rules(cls, data: Any) -> Any:
        problems = header_problems(data) or uniqueness_problems(data["reports"])
        if problems:
            raise ValueError("; ".join(problems))
        return data


def validated() -> ReportsFile:
    """The packaged base, validated by this model (once per process)."""
    return datafiles.load("reports.json", ReportsFile)
