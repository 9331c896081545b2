"""What a cell is: its kind and its typed parameters (the planner writes them, the child probes read them).

On the wire (plan files, the journal, the pipe to the child) a cell's parameters are one JSON object,
``CellSpec.params``; in code they are typed: :class:`MoeParams`, :class:`AttentionParams`,
:class:`EngineParams`, :class:`ImportParams` (written by the planner with ``CellSpec.make``, read by the
child probes with ``XParams.from_wire``), the scheduler's view :class:`CellBudget` and the matrix's view
:class:`CellShape` (:func:`cell_shape`, lenient: a journaled result may carry partial parameters). The
defaults live here and nowhere else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Literal, TypeVar, get_args


class CellKind(str, Enum):
    """What a cell probes; the value is what JSON, journals and matrices carry."""

    IMPORT = "import"
    MOE = "moe"
    ATTENTION = "attention"
    ENGINE = "engine"
    FIXTURE = "fixture"  # test cells (``tests/sandbox/children``)

    def __str__(self) -> str:
        return self.value


#: the kind as a JSON string, for published records (``probe.matrix.schema.Cell.kind``): the same
#: values as :class:`CellKind`, kept inline in the published JSON Schema
CellKindName = Literal["import", "moe", "attention", "engine", "fixture"]
assert set(get_args(CellKindName)) == {k.value for k in CellKind}

#: the kinds ``probe run`` plans, in plan order
PLANNED_KINDS: tuple[CellKind, ...] = (CellKind.IMPORT, CellKind.MOE, CellKind.ATTENTION, CellKind.ENGINE)


class CellParamsError(ValueError):
    """A cell's wire parameters do not fit its kind (raised inside the child: a plan / probe bug)."""


#: wire keys of ``params`` that are the scheduler's (:class:`CellBudget`), not what the cell measures
BUDGET_KEYS = frozenset({"mem_gib", "exclusive", "gpus"})


@dataclass(frozen=True)
class CellBudget:
    """What a cell asks of the scheduler: its time limit, a memory estimate, and whether it needs the
    GPU to itself (an engine claims ``gpu_memory_utilization`` of the device), and how many GPUs it
    needs (a tensor-parallel engine: one per rank; on the wire only when more than 1)."""

    timeout_s: float = 300.0
    mem_gib: float | None = None
    exclusive: bool = False
    gpus: int = 1


def as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


_P = TypeVar("_P", bound="_WireParams")
_SCALARS: dict[str, type | tuple[type, ...]] = {"int": int, "str": str, "bool": bool, "float": (int, float)}


@dataclass(frozen=True, kw_only=True)
class _WireParams:
    """Typed parameters of one kind; fields in wire order. ``_OPTIONAL`` fields are left out of the
    wire object while None (probe knobs with a default the child applies: ``effective_*``)."""

    KIND: ClassVar[CellKind]
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset()

    def to_wire(self, budget: CellBudget | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in self._OPTIONAL and value in (None, {}):
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        if budget is not None and budget.mem_gib is not None:
            out["mem_gib"] = budget.mem_gib
        if budget is not None and budget.exclusive:
            out["exclusive"] = True
        if budget is not None and budget.gpus > 1:
            out["gpus"] = budget.gpus
        return out

    @classmethod
    def from_wire(cls: type[_P], params: Mapping[str, Any]) -> _P:
        """Parse a wire object; unknown keys (the budget's among them) are ignored."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in params.items() if k in known}
        try:
            obj = cls(**kwargs)
        except TypeError as exc:
            raise CellParamsError(f"{cls.KIND.value} cell parameters: {exc}") from exc
        obj._check()
        return obj

    def _check(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or f.type not in ("int", "str", "bool", "float"):
                continue
            want: type | tuple[type, ...] = _SCALARS[str(f.type)]
            if not isinstance(value, want) or (f.type == "int" and isinstance(value, bool)):
                raise CellParamsError(f"{self.KIND.value} cell parameter {f.name}={value!r} is not {f.type}")


@dataclass(frozen=True, kw_only=True)
class ImportParams(_WireParams):
    """The ``import`` cell takes no parameters."""

    KIND: ClassVar[CellKind] = CellKind.IMPORT


@dataclass(frozen=True, kw_only=True)
class MoeParams(_WireParams):
    """One MoE layer: backend x quant at a shape (``intermediate`` per TP shard)."""

    KIND: ClassVar[CellKind] = CellKind.MOE
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"seed", "iters", "warmup"})

    backend: str
    quant: str = "bf16"
    experts: int
    hidden: int
    intermediate: int
    top_k: int = 8
    tp: int = 1
    model: str | None = None
    batch_sizes: tuple[int, ...] | list[int] = (1, 64)
    matrix: str | None = None  # "kernel" (the E sweep) or "model" (a model's real shape)
    seed: int | None = None
    iters: int | None = None
    warmup: int | None = None

    @property
    def effective_seed(self) -> int:
        return 0 if self.seed is None else self.seed

    @property
    def effective_iters(self) -> int:
        return 10 if self.iters is None else self.iters

    @property
    def effective_warmup(self) -> int:
        return 3 if self.warmup is None else self.warmup


class _EngineBacked:
    """What every cell that builds a ``vllm.LLM`` answers (``probe.probes.engine.engine_kwargs``)."""

    fa_version: int | None
    max_model_len: int | None
    gpu_memory_utilization: float | None

    @property
    def effective_max_model_len(self) -> int:
        return 1024 if self.max_model_len is None else self.max_model_len

    @property
    def effective_gpu_memory_utilization(self) -> float:
        return 0.5 if self.gpu_memory_utilization is None else float(self.gpu_memory_utilization)

    @property
    def moe_choice(self) -> str | None:
        return None

    @property
    def attention_choice(self) -> str | None:
        return None

    @property
    def extra_engine_args(self) -> dict[str, str]:
        return {}

    @property
    def effective_tp(self) -> int:
        return 1

    @property
    def effective_dp(self) -> int:
        return 1

    @property
    def expert_parallel(self) -> bool:
        return False


@dataclass(frozen=True, kw_only=True)
class AttentionParams(_EngineBacked, _WireParams):
    """One attention backend at a model's head layout (TP=1)."""

    KIND: ClassVar[CellKind] = CellKind.ATTENTION
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {"max_model_len", "gpu_memory_utilization", "prompt_len", "decode_steps", "sinks", "sliding_window"}
    )

    backend: str
    fa_version: int | None = None
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden: int = 2048
    model: str | None = None
    mla: bool = False
    prompt_len: int | None = None
    decode_steps: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    sinks: bool | None = None  # attention-layer cells: the model's attention sinks (gpt-oss)
    sliding_window: int | None = None

    @property
    def attention_choice(self) -> str | None:
        return self.backend

    @property
    def effective_prompt_len(self) -> int:
        return 200 if self.prompt_len is None else self.prompt_len

    @property
    def effective_decode_steps(self) -> int:
        return 8 if self.decode_steps is None else self.decode_steps


@dataclass(frozen=True, kw_only=True)
class EngineParams(_EngineBacked, _WireParams):
    """A 1-2-layer engine of a model profile with an explicit MoE x attention pairing; with
    ``tensor_parallel_size`` > 1 one rank per GPU (``enable_expert_parallel``: the MoE sharded by
    experts instead of by width), with ``data_parallel_size`` > 1 one engine per DP rank. All three are
    left out of the wire while None (TP=1 cells keep their historical parameters)."""

    KIND: ClassVar[CellKind] = CellKind.ENGINE
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {
            "max_model_len",
            "gpu_memory_utilization",
            "tokens",
            "engine_args",
            "tensor_parallel_size",
            "enable_expert_parallel",
            "data_parallel_size",
        }
    )

    model: str
    moe_backend: str = "auto"
    attention_backend: str = "auto"
    fa_version: int | None = None
    quant: str | None = None  # None: the profile's own format
    layers: int = 2
    tokens: int | None = None
    engine_args: dict[str, str] = field(default_factory=dict)
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int | None = None
    enable_expert_parallel: bool | None = None
    #: > 1: one engine per data-parallel rank (vLLM's offline DP recipe), each of tensor_parallel_size GPUs;
    #: with expert parallelism the MoE runs over tp x dp ranks through the all2all backend
    #: (``engine_args.all2all_backend``)
    data_parallel_size: int | None = None

    @property
    def effective_tp(self) -> int:
        return 1 if self.tensor_parallel_size is None else self.tensor_parallel_size

    @property
    def effective_dp(self) -> int:
        return 1 if self.data_parallel_size is None else self.data_parallel_size

    @property
    def expert_parallel(self) -> bool:
        return bool(self.enable_expert_parallel)

    @property
    def moe_choice(self) -> str | None:
        return self.moe_backend

    @property
    def attention_choice(self) -> str | None:
        return self.attention_backend

    @property
    def extra_engine_args(self) -> dict[str, str]:
        return dict(self.engine_args)

    @property
    def effective_tokens(self) -> int:
        return 8 if self.tokens is None else self.tokens

    def to_wire(self, budget: CellBudget | None = None) -> dict[str, Any]:
        # historical wire order: ..., layers, mem_gib, engine_args, exclusive
        out = _WireParams.to_wire(self, None)
        args = out.pop("engine_args", None)
        if budget is not None and budget.mem_gib is not None:
            out["mem_gib"] = budget.mem_gib
        if args:
            out["engine_args"] = args
        if budget is not None and budget.exclusive:
            out["exclusive"] = True
        if budget is not None and budget.gpus > 1:
            out["gpus"] = budget.gpus
        return out


CellParams = ImportParams | MoeParams | AttentionParams | EngineParams


@dataclass(frozen=True)
class CellShape:
    """What a matrix cell reads of a result's parameters: every field optional, since a journaled
    result may carry partial parameters (and fixture kinds carry their own)."""

    backend: str | None = None
    moe_backend: str | None = None
    attention_backend: str | None = None
    fa_version: int | None = None
    engine_args: dict[str, str] = field(default_factory=dict)
    quant: str | None = None
    experts: int | None = None
    top_k: int | None = None
    hidden: int | None = None
    intermediate: int | None = None
    tp: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    model: str | None = None


def _opt_str(value: Any) -> str | None:
    return str(value) if value is not None else None


def cell_shape(kind: CellKind | str, p: Mapping[str, Any]) -> CellShape:
    """The matrix view of a result's wire parameters (``backend`` of an engine cell: ``moe+attention``)."""
    backend = p.get("backend")
    moe_backend = (
        p.get("moe_backend") if kind == CellKind.ENGINE else (backend if kind == CellKind.MOE else None)
    )
    attn_backend = (
        p.get("attention_backend")
        if kind == CellKind.ENGINE
        else (backend if kind == CellKind.ATTENTION else None)
    )
    if kind == CellKind.ENGINE and not backend:
        backend = "+".join(str(x) for x in (moe_backend, attn_backend) if x) or None
    return CellShape(
        backend=_opt_str(backend),
        moe_backend=_opt_str(moe_backend),
        attention_backend=_opt_str(attn_backend),
        fa_version=as_int(p.get("fa_version")),
        engine_args={str(k): str(v) for k, v in (p.get("engine_args") or {}).items()},
        quant=p.get("quant"),
        experts=as_int(p.get("experts")),
        top_k=as_int(p.get("top_k")),
        hidden=as_int(p.get("hidden")),
        intermediate=as_int(p.get("intermediate")),
        tp=as_int(p.get("tensor_parallel_size") if kind == CellKind.ENGINE else p.get("tp")),
        num_heads=as_int(p.get("num_heads")),
        num_kv_heads=as_int(p.get("num_kv_heads")),
        head_dim=as_int(p.get("head_dim")),
        model=p.get("model"),
    )
