"""Parent side, step 1: turn GPU targets x model profiles into the oracle child's request.

Typed, JSON-ready queries: one :class:`AttentionQuery` per model (what vLLM's ``Attention`` /
``MLAAttention`` layer hands the selector: head size — ``kv_lora_rank + qk_rope_head_dim`` for
MLA —, bf16, kv-cache ``auto``, no user block size, sinks, sliding window) and one
:class:`MoeQuery` per MoE model x quant format it ships in x TP size (the experts' GEMM width is
the LatentMoE ``latent_size`` when the profile has one; a TP that does not divide the intermediate
size is left out, as vLLM asserts on it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

from probe.catalog import datafiles
from probe.catalog.gpus import Gpu
from probe.catalog.models import ModelProfile, quantization_config
from probe.errors import DataFileError

DEFAULT_TPS: tuple[int, ...] = (1, 2, 4)


# The profile's activation as vLLM's model code hands it to FusedMoE: nemotron_h experts are non-gated
# squared-ReLU (`activation_without_mul(config.mlp_hidden_act)` -> MoEActivation.RELU2_NO_MUL), not the
# gated RELU2 that the gated kernels check for.
VLLM_MOE_ACTIVATION = {"relu2": "relu2_no_mul"}


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


@cache
def _routing_table() -> dict[str, Any]:
    data = datafiles.read_json("oracle_routing.json")
    if not isinstance(data, dict) or not isinstance(data.get("model_types"), dict) or "default" not in data:
        raise DataFileError("probe/data/oracle_routing.json: needs 'default' and 'model_types'")
    return data


def routing_for(profile: ModelProfile) -> dict[str, Any]:
    table = _routing_table()
    key = profile.text_model_type or profile.model_type
    return dict(
        table["model_types"].get(key) or table["model_types"].get(profile.model_type) or table["default"]
    )


def attention_query(profile: ModelProfile) -> AttentionQuery:
    hybrid = profile.hybrid or {}
    head = profile.head_dim
    if profile.mla is not None:
        head = profile.mla.kv_lora_rank + profile.mla.qk_rope_head_dim
    return AttentionQuery(
        model=profile.slug,
        head_size=head,
        num_heads=profile.num_attention_heads,
        num_kv_heads=profile.num_key_value_heads,
        use_mla=profile.mla is not None,
        has_sink=bool(hybrid.get("attention_sinks")),
        has_sliding_window=hybrid.get("sliding_window") is not None,
    )


def moe_queries(profile: ModelProfile, tps: tuple[int, ...] = DEFAULT_TPS) -> list[MoeQuery]:
    moe = profile.moe
    if moe is None:
        return []
    quants = list(dict.fromkeys([*profile.quant_formats, profile.quant]))
    out: list[MoeQuery] = []
    for quant in quants:
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
                    routing=routing_for(profile),
                    hf_quant_config=quantization_config(quant),
                )
            )
    return out


def plan(gpus: list[Gpu], profiles: list[ModelProfile], tps: tuple[int, ...] = DEFAULT_TPS) -> OracleRequest:
    return OracleRequest(
        targets=tuple(Target.of(g) for g in gpus),
        attention=tuple(attention_query(p) for p in profiles),
        moe=tuple(q for p in profiles for q in moe_queries(p, tps)),
    )
