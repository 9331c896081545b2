"""Parent side, step 1: turn GPU targets x model profiles into the oracle child's request.

Typed, JSON-ready queries: one :class:`AttentionQuery` per distinct attention layer kind of a model
(:meth:`~probe.catalog.profile.ModelProfile.layer_kinds`: what each of vLLM's ``Attention`` /
``MLAAttention`` layers hands the selector — head size, ``kv_lora_rank + qk_rope_head_dim`` for MLA,
Gemma-4's ``global_head_dim`` on its global layers —, bf16, kv-cache ``auto``, no user block size,
sinks, sliding window, sparse MLA) and one :class:`MoeQuery` per MoE model x quant scheme x TP size:
for a model read from a config, the routed experts' own scheme (which can differ from the model's
headline quant); for a catalog profile, each quant format it ships in. The experts' GEMM width is the
LatentMoE ``latent_size`` when the profile has one; a TP that does not divide the intermediate size
is left out, as vLLM asserts on it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from probe.catalog.gpus import Gpu
from probe.catalog.layer_kinds import VLLM_MOE_ACTIVATION, AttentionKind
from probe.catalog.models import QUANTS, ModelProfile, quantization_config
from probe.modelcfg.layer_spec import routing_of

DEFAULT_TPS: tuple[int, ...] = (1, 2, 4)
#: the KV-cache dtypes every attention kind is asked with (vLLM's --kv-cache-dtype: auto, fp8)
DEFAULT_KV_DTYPES: tuple[str, ...] = ("auto", "fp8")
#: expert-parallel layouts asked beside TP: (tp, dp) with --enable-expert-parallel (EP size tp x dp)
DEFAULT_EP: tuple[tuple[int, int], ...] = ((2, 1), (4, 1), (1, 2))


@dataclass(frozen=True)
class Target:
    sm: int
    name: str

    @classmethod
    def of(cls, gpu: Gpu) -> Target:
        return cls(sm=gpu.sm, name=gpu.names[0] if gpu.names else f"sm_{gpu.sm}")


@dataclass(frozen=True)
class AttentionQuery:
    model: str
    head_size: int
    num_heads: int
    num_kv_heads: int
    use_mla: bool = False
    has_sink: bool = False
    has_sliding_window: bool = False
    use_sparse: bool = False
    dtype: str = "bfloat16"
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    attn_type: str = "decoder"
    kind: str = ""  # the layer kind's label (AttentionKind.label) when the model has several
    layers: int = 0  # how many of the model's layers are of this kind


@dataclass(frozen=True)
class MoeQuery:
    model: str
    quant: str
    tp: int
    experts: int
    top_k: int
    hidden: int
    intermediate: int
    activation: str
    routing: dict[str, Any] = field(default_factory=dict)
    hf_quant_config: dict[str, Any] | None = None
    ep: bool = False  # --enable-expert-parallel: experts sharded over tp x dp ranks, widths whole
    dp: int = 1


@dataclass(frozen=True)
class OracleRequest:
    targets: tuple[Target, ...]
    attention: tuple[AttentionQuery, ...]
    moe: tuple[MoeQuery, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "targets": [asdict(t) for t in self.targets],
            "attention": [asdict(q) for q in self.attention],
            "moe": [asdict(q) for q in self.moe],
        }


def _attention_query(profile: ModelProfile, kind: AttentionKind, several: bool) -> AttentionQuery:
    return AttentionQuery(
        model=profile.slug,
        head_size=kind.head_size,
        num_heads=kind.num_heads,
        num_kv_heads=kind.num_kv_heads,
        use_mla=kind.mla,
        has_sink=kind.sink,
        has_sliding_window=kind.sliding_window is not None,
        use_sparse=kind.sparse,
        kind=kind.label if several else "",
        layers=kind.layers if several else 0,
    )


def attention_queries(profile: ModelProfile) -> list[AttentionQuery]:
    """One query per distinct attention layer kind (none for a model whose layers all bypass vLLM's
    generic selector, e.g. DeepSeek-V4's own sparse attention)."""
    kinds = profile.layer_kinds()
    return [_attention_query(profile, k, len(kinds) > 1) for k in kinds]


def _moe_quants(profile: ModelProfile) -> list[str]:
    if profile.moe is not None and profile.moe.scheme is not None:
        return [profile.moe.scheme]  # read from a config: the experts' own scheme
    return list(dict.fromkeys([*profile.quant_formats, profile.quant]))


def moe_queries(profile: ModelProfile, tps: tuple[int, ...] = DEFAULT_TPS) -> list[MoeQuery]:
    moe = profile.moe
    if moe is None:
        return []
    out: list[MoeQuery] = []
    for quant in _moe_quants(profile):
        for tp in tps:
            if moe.intermediate % tp:
                continue
            out.append(
                MoeQuery(
                    model=profile.slug,
                    quant=quant,
                    tp=tp,
                    experts=moe.experts,
                    top_k=moe.top_k,
                    hidden=moe.latent_size or profile.hidden_size,
                    intermediate=moe.intermediate,
                    activation=VLLM_MOE_ACTIVATION.get(moe.activation, moe.activation),
                    routing=routing_of(profile),
                    hf_quant_config=quantization_config(quant) if quant in QUANTS else None,
                )
            )
    return out


def plan(
    gpus: list[Gpu],
    profiles: list[ModelProfile],
    tps: tuple[int, ...] = DEFAULT_TPS,
    kv_dtypes: tuple[str, ...] = DEFAULT_KV_DTYPES,
    ep: tuple[tuple[int, int], ...] = DEFAULT_EP,
) -> OracleRequest:
    """Every target x model: attention per layer kind x KV-cache dtype, MoE per quant x TP and per
    expert-parallel layout (``ep``: (tp, dp) pairs)."""
    attention = [q for p in profiles for q in attention_queries(p)]
    moe = [q for p in profiles for q in moe_queries(p, tps)]
    return OracleRequest(
        targets=tuple(Target.of(g) for g in gpus),
        attention=tuple(replace(q, kv_cache_dtype=kv) for kv in kv_dtypes for q in attention),
        moe=tuple(moe + [replace(q, tp=tp, dp=dp, ep=True) for tp, dp in ep for q in moe if q.tp == 1]),
    )
