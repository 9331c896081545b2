"""The plan in order of value, for a run with a time budget: what decides the requested models' answer runs
first.

Each cell gets a tier (smaller first; the plan's own order within a tier) from two questions:

1. *Where* — the import cell first (versions, what imports: every verdict needs it); then what decides
   each requested model's answer soonest: every MoE backend at the model's own shape and quant at TP 1 (a
   refusal costs a hundredth of a second), every attention backend at the model's head layout, then the
   engine check (the model's 1-GPU engines of the recommended pair, its runner-up and vLLM's ``auto``);
   then the model's other cells (MoE at other TP sizes and quants, its other engines, multi-GPU ones);
   then the sweep (the kernel matrix over expert counts, other layouts).
2. *Which backend* — the current recommendation for the model on this GPU, then its runner-up (from
   ``probe recommend`` over the published matrices, when they cover this GPU: :class:`Preferred`), then
   vLLM's defaults (``auto``), then the rest.

The tier is ``4 * where + which``. The runner keeps this order (a warm worker prefers cells of its own
environment only within a tier) and, when the budget ends, what was not reached is ``not_run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from probe.cells import CellSpec

WHERE = (
    "import",
    "answer: MoE at the model's shape",
    "answer: attention at the model's layout",
    "answer: engine check",
    "model: other TP / quant / engines",
    "sweep",
)
WHICH = ("recommended", "runner-up", "vLLM default (auto)", "other")
ENGINE_CHECK = WHERE.index("answer: engine check")


@dataclass(frozen=True)
class ModelFocus:
    """A requested model: its profile slug, quant format and attention head layout (TP=1)."""

    slug: str
    quant: str
    layout: tuple[int, int, int] | None = None  # (heads, kv heads, head dim)
    moe_shapes: tuple[tuple[int, ...], ...] = ()  # (experts, hidden, intermediate, top_k, tp) per TP


@dataclass(frozen=True)
class Preferred:
    """A backend pair ``probe recommend`` names for a model: ``rank`` 0 the recommendation, 1 runner-up."""

    model: str
    moe: str | None
    attention: str | None
    fa_version: int | None
    rank: int


@dataclass(frozen=True)
class Priorities:
    """What the order is built from; ``notes`` say what was left out (no GPU seen, no matrix for it)."""

    models: tuple[ModelFocus, ...] = ()
    preferred: tuple[Preferred, ...] = ()
    notes: tuple[str, ...] = ()


def focus_of(names: Sequence[str]) -> tuple[ModelFocus, ...]:
    """The requested models as :class:`ModelFocus` (unknown names are the planner's error, not ours)."""
    from probe.errors import UsageError
    from probe.modelcfg.resolve import resolve_model

    out = []
    for name in names:
        try:
            m = resolve_model(name)
        except UsageError:
            continue
        a = m.attention_shape(1)
        shapes = []
        for tp in (1, 2, 4, 8):
            try:
                sh = m.moe_shape(tp) if m.is_moe else None
            except UsageError:
                continue
            if sh:
                shapes.append(tuple(sh[k] for k in _MOE_KEYS))
        layout = (a["num_heads"], a["num_kv_heads"], a["head_dim"])
        out.append(ModelFocus(m.slug, m.quant, layout, tuple(shapes)))
    return tuple(out)


_MOE_KEYS = ("experts", "hidden", "intermediate", "top_k", "tp")


def _layout(p: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return (p.get("num_heads"), p.get("num_kv_heads"), p.get("head_dim"))


def where(spec: CellSpec, models: Sequence[ModelFocus]) -> int:
    """0 import, 1 a model's MoE shape (own quant, TP 1), 2 its attention layout, 3 its 1-GPU engines in
    its quant, 4 its other cells, 5 the sweep."""
    kind, p = spec.kind.value, spec.params
    if kind == "import":
        return 0
    for m in models:  # a kernel-sweep cell at the model's own shape is one of its cells too
        at_shape = p.get("model") == m.slug or tuple(p.get(k) for k in _MOE_KEYS) in m.moe_shapes
        if kind == "moe" and at_shape:
            return 1 if p.get("quant") == m.quant and p.get("tp") in (None, 1) else 4
        if kind == "attention" and (p.get("model") == m.slug or _layout(p) == m.layout):
            return 2
        if kind == "engine" and p.get("model") == m.slug:
            one_gpu = (p.get("tensor_parallel_size") or 1) == 1 and not p.get("enable_expert_parallel")
            return 3 if one_gpu and p.get("quant") in (None, m.quant) else 4
    return 5


def _halves(spec: CellSpec) -> tuple[Any, Any, Any]:
    p = spec.params
    kind = spec.kind.value
    moe = p.get("backend") if kind == "moe" else p.get("moe_backend")
    attn = p.get("backend") if kind == "attention" else p.get("attention_backend")
    return moe, attn, p.get("fa_version")


def which(spec: CellSpec, preferred: Sequence[Preferred]) -> int:
    """0 the recommendation, 1 the runner-up, 2 vLLM's default (``auto``), 3 any other backend."""
    kind = spec.kind.value
    moe, attn, fa = _halves(spec)
    best = 3
    for pref in preferred:  # a model's pair counts for its own cells and for the sweep's
        if spec.params.get("model") not in (None, pref.model):
            continue
        same_attn = attn == pref.attention and (pref.fa_version is None or fa in (None, pref.fa_version))
        hit = {
            "moe": moe == pref.moe,
            "attention": same_attn,
            "engine": moe == pref.moe and same_attn,
        }.get(kind, False)
        if hit:
            best = min(best, pref.rank)
    if best == 3 and "auto" in (moe, attn):
        return 2
    return best


def tiers(specs: Sequence[CellSpec], prio: Priorities) -> dict[str, int]:
    """Cell id -> tier (``4 * where + which``; the import cell 0)."""
    out = {}
    for s in specs:
        w, b = where(s, prio.models), which(s, prio.preferred)
        if w == ENGINE_CHECK and b == len(WHICH) - 1:  # the check runs the pairs the answer weighs
            w += 1
        out[s.id] = 0 if w == 0 else 4 * w + b
    return out


def by_value(specs: Sequence[CellSpec], prio: Priorities) -> tuple[list[CellSpec], dict[str, int]]:
    """The cells in order of value (stable: the plan's order within a tier) and their tiers."""
    t = tiers(specs, prio)
    return sorted(specs, key=lambda s: t[s.id]), t


def tier_label(tier: int) -> str:
    return f"{WHERE[tier // 4]}, {WHICH[tier % 4]}" if tier else WHERE[0]
