"""The published matrix, schema version 1 (pydantic v2 models; JSON Schema exported from them).

Two document kinds share this module:

- ``Matrix`` (``"kind": "matrix"``): one probe run of one image on one GPU — provenance, the static
  section from ``probe scan``, and one ``Cell`` per probe. Cells carry their evidence source:
  ``measured`` (ran here), ``predicted`` (from the static scan) or ``reported`` (a known field
  report, with its citation).
- ``Fleet`` (``"kind": "fleet"``): ``probe merge`` output — several matrices side by side, each with
  a column label (one GPU / image per column). Every member is a complete ``Matrix``.

The committed JSON Schemas are ``probe/schema/matrix-v1.json`` and ``probe/schema/fleet-v1.json``
(regenerate with ``python3 -m probe.matrix.schema``; a test fails when they drift).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
    model_validator,
)

from probe.cell_params import CellKindName
from probe.cells import CellRecord, ordered
from probe.matrix import cell_rules

SCHEMA_VERSION: Literal[1] = 1

Evidence = Literal["measured", "predicted", "reported"]
Basis = Literal["vllm_check", "elf_scan", "hand_rule", "field_report"]
StaticVerdictName = Literal["sass", "sass-compatible", "ptx-jit", "none", "jit", "pure", "not-installed"]
RunStatus = Literal["complete", "partial", "infra_failed"]

_CC_RE = re.compile(r"^\d{1,2}\.\d$")


def cc_to_sm(value: Any) -> int | None:
    """'11.0' / [11, 0] / 'sm_110a' / 110 -> 110; anything else -> None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(x, int) for x in value):
        return int(value[0]) * 10 + int(value[1])
    if isinstance(value, str):
        if m := re.match(r"^(\d{1,2})\.(\d)$", value.strip()):
            return int(m.group(1)) * 10 + int(m.group(2))
        if m := re.match(r"^sm_?(\d{2,3})[af]?$", value.strip().lower()):
            return int(m.group(1))
    return None


class GpuInfo(BaseModel):
    """The GPU the cells were measured on (or, for a prediction-only matrix, the GPU predicted for)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    sm: int | None = Field(default=None, ge=10, le=999, description="compute capability major*10+minor")
    cc: str | None = Field(default=None, description="compute capability as text, e.g. '11.0'")
    memory_gib: float | None = None
    integrated: bool | None = None
    unified_memory: bool | None = None
    count: int | None = Field(default=None, ge=0, description="visible GPUs of this kind")

    @property
    def target(self) -> str | None:
        return f"sm_{self.sm}" if self.sm is not None else None

    @model_validator(mode="after")
    def _cc_matches_sm(self) -> GpuInfo:
        if self.cc is not None:
            if not _CC_RE.match(self.cc):
                raise ValueError(f"gpu.cc {self.cc!r} is not a compute capability such as '11.0'")
            major, minor = (int(x) for x in self.cc.split("."))
            if self.sm is not None and major * 10 + minor != self.sm:
                raise ValueError(f"gpu.cc {self.cc} does not match gpu.sm {self.sm}")
        return self


class Versions(BaseModel):
    """Library versions of the probed image (None = not installed / not known)."""

    model_config = ConfigDict(extra="allow")

    python: str | None = None
    torch: str | None = None
    torch_cuda: str | None = Field(default=None, description="CUDA version torch was built for")
    cuda_runtime: str | None = None
    driver: str | None = None
    vllm: str | None = None
    flashinfer: str | None = None
    flashinfer_cubin: str | None = None
    flashinfer_jit_cache: str | None = None
    flash_attn: str | None = None
    triton: str | None = None


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    image: str | None = Field(default=None, description="image name (from --image or $PROBE_IMAGE)")
    image_digest: str | None = Field(
        default=None, description="image digest ($PROBE_IMAGE_DIGEST / $IMAGE_DIGEST)"
    )
    host: str | None = None
    created_at: str = Field(description="ISO-8601 UTC time the matrix was written")
    probe_version: str
    platform: str | None = Field(default=None, description="e.g. 'Linux-6.8 aarch64'")
    versions: Versions = Field(default_factory=Versions)
    gpu: GpuInfo | None = None
    label: str | None = Field(default=None, description="short column label (merge); defaults to GPU + image")
    note: str | None = None


class RunInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: RunStatus = "complete"
    cells_planned: int | None = Field(default=None, ge=0)
    infra_error: str | None = Field(default=None, description="why the prober itself failed, when it did")


class StaticKernel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arches: list[str] = Field(description="target labels, e.g. ['sm_90a', 'compute_80']")


class StaticFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    package: str | None = None
    arches: list[str] = []
    kernels: list[StaticKernel] = []
    error: str | None = None


class StaticVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: StaticVerdictName
    reason: str
    via: str | None = Field(default=None, description="the target label that decided it, e.g. 'compute_80'")
    files: list[str] = []


class StaticSection(BaseModel):
    """``probe scan`` output, reduced: arches per file (and per kernel), verdicts per backend x target."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = Field(default=None, description="what was scanned (image, wheel set, site-packages)")
    packages: dict[str, str] = Field(default_factory=dict, description="package -> version that was scanned")
    targets: list[str] = []
    files: list[StaticFile] = []
    backends: dict[str, dict[str, StaticVerdict]] = Field(
        default_factory=dict, description="backend -> target (e.g. 'sm_110') -> verdict"
    )


#: the order a matrix writes a cell's fields in (published matrices re-render byte for byte)
CELL_FIELD_ORDER: tuple[str, ...] = (
    "id", "kind", "evidence", "citation", "basis", "gpu_sm", "backend", "moe_backend", "attention_backend",
    "fa_version", "engine_args", "quant", "experts", "top_k", "hidden", "intermediate", "tp", "num_heads",
    "num_kv_heads", "head_dim", "model", "vllm_version", "outcome", "degraded", "degraded_reasons", "phase",
    "root_cause", "hint", "exit_code", "signal", "wall_s", "peak_rss_mb", "timings", "ref_error", "details",
    "log_excerpt", "params",
)  # fmt: skip


class Cell(CellRecord):
    """One probe outcome, with its shape and evidence source (what happened: ``probe.cells.CellRecord``)."""

    kind: CellKindName
    evidence: Evidence = "measured"
    citation: str | None = Field(default=None, description="required for evidence 'reported'")
    basis: Basis | None = Field(
        default=None,
        description="what the evidence rests on: vLLM's own selection check, an ELF scan, a hand rule, "
        "a field report (None: not stated; measured cells need none)",
    )
    gpu_sm: int | None = Field(default=None, description="GPU the cell is about (predicted/reported cells)")
    backend: str | None = Field(
        default=None, description="moe: --moe-backend value; attention: backend enum name"
    )
    moe_backend: str | None = None
    attention_backend: str | None = None
    fa_version: int | None = None
    engine_args: dict[str, str] = Field(
        default_factory=dict,
        description="engine cells: extra vLLM engine arguments the run used, e.g. gdn_prefill_backend",
    )
    quant: str | None = None
    experts: int | None = None
    top_k: int | None = None
    hidden: int | None = None
    intermediate: int | None = Field(default=None, description="MoE intermediate width per TP shard")
    tp: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    model: str | None = None
    vllm_version: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Cell:
        if cell_rules.missing_citation(self.evidence, self.citation):
            raise ValueError(f"cell {self.id!r}: a reported cell needs a citation")
        bad = cell_rules.bad_number(self.wall_s, self.peak_rss_mb, self.timings)
        if bad is not None:  # a NaN or negative speed would pass (or fail) a gate by accident
            raise ValueError(f"cell {self.id!r}: {bad}")
        return self

    @model_serializer(mode="wrap")
    def _matrix_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Fields in :data:`CELL_FIELD_ORDER`; ``basis`` is left out when not stated, so matrices written
        before it existed re-render byte for byte."""
        data: dict[str, Any] = ordered(handler(self), CELL_FIELD_ORDER)
        if data.get("basis") is None:
            data.pop("basis", None)
        return data


class Matrix(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["matrix"] = "matrix"
    provenance: Provenance
    run: RunInfo = Field(default_factory=RunInfo)
    static: StaticSection | None = None
    cells: list[Cell] = []

    @field_serializer("cells", mode="wrap")
    def _cells_as_list(self, cells: Any, handler: SerializerFunctionWrapHandler) -> Any:
        """Cells kept in their file (``probe.matrix.lazy``) are read when the whole matrix is dumped."""
        return handler(cells if isinstance(cells, list) else list(cells))

    @model_validator(mode="after")
    def _consistent(self) -> Matrix:
        dup = cell_rules.duplicate_id(cell.id for cell in self.cells)
        if dup is not None:
            raise ValueError(f"duplicate cell id {dup!r}")
        gpu = self.provenance.gpu
        if gpu is not None and gpu.sm is not None:
            for cell in self.cells:
                as_json = {"evidence": cell.evidence, "gpu_sm": cell.gpu_sm}
                if cell_rules.measured_sm_conflict(as_json, gpu.sm):
                    raise ValueError(
                        f"measured cell {cell.id!r} says sm_{cell.gpu_sm} but the provenance "
                        f"GPU is sm_{gpu.sm}"
                    )
                dgpu = cell.details.get("gpu") if isinstance(cell.details, dict) else None
                child_sm = cc_to_sm(dgpu.get("cc")) if isinstance(dgpu, dict) else None
                if cell.evidence == "measured" and child_sm is not None and child_sm != gpu.sm:
                    raise ValueError(
                        f"cell {cell.id!r} ran on a GPU of compute capability {dgpu['cc']} "  # type: ignore[index]
                        f"but the provenance says sm_{gpu.sm}"
                    )
        return self

    def column_label(self) -> str:
        p = self.provenance
        if p.label:
            return p.label
        gpu = p.gpu.target if p.gpu and p.gpu.sm else "no-gpu"
        name = (p.gpu.name if p.gpu and p.gpu.name else None) or gpu
        image = (p.image or "").rsplit("/", 1)[-1]
        return f"{name} ({gpu})" + (f" {image}" if image else "")


class Fleet(BaseModel):
    """``probe merge`` output: one view across GPUs and images, one member matrix per column."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["fleet"] = "fleet"
    created_at: str
    probe_version: str
    columns: list[str] = Field(description="one label per member, same order as matrices")
    matrices: list[Matrix] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Fleet:
        if len(self.columns) != len(self.matrices):
            raise ValueError(f"{len(self.columns)} column labels for {len(self.matrices)} matrices")
        if len(set(self.columns)) != len(self.columns):
            raise ValueError("duplicate column labels")
        return self


SCHEMA_FILES: dict[str, type[BaseModel]] = {"matrix-v1.json": Matrix, "fleet-v1.json": Fleet}


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://probe.invalid/schema/{model.__name__.lower()}-v{SCHEMA_VERSION}.json"
    return schema


def render_schema(model: type[BaseModel]) -> str:
    return json.dumps(json_schema(model), indent=2, sort_keys=True) + "\n"


def schema_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "schema"


def main() -> int:
    """Regenerate the committed JSON Schema files."""
    out = schema_dir()
    out.mkdir(exist_ok=True)
    for name, model in SCHEMA_FILES.items():
        (out / name).write_text(render_schema(model), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
