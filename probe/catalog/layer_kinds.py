"""What vLLM's backend selection depends on, per distinct layer type of a model.

A model is read into (a) its distinct attention layer kinds — each what one layer hands vLLM's
``get_attn_backend``: head size (``kv_lora_rank + qk_rope_head_dim`` for MLA, Gemma-4's
``global_head_dim`` on its global layers), heads, KV heads, sliding window, sinks, MLA, sparse
(an indexer), chunked-local — with how many layers have it; (b) the layers that hold no KV cache
(Mamba, gated-delta-net, linear attention), counted apart; (c) the routed experts (width, top-k,
activation as vLLM names it, routing inputs, and the experts' own quant scheme); (d) the quant scheme
of the checkpoint (:class:`QuantScheme`).

:func:`layer_spec` renders a profile's reading as the JSON the oracle child's vLLM-side reader
(:mod:`probe.oracle.child_model`) prints, so the two compare field by field.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Any

from probe.catalog import datafiles
from probe.errors import DataFileError

#: quant schemes of weights / experts: probe's quant names (probe.catalog.quants.QUANTS) plus the
#: schemes a checkpoint can carry that have no MoE probe of their own
SCHEMES: tuple[str, ...] = (
    "bf16",
    "fp8",
    "fp8_block",
    "nvfp4",
    "nvfp4_w4a16",
    "mxfp4",
    "mxfp8",
    "int4_w4a16",
)

#: the activation a profile names -> the ``MoEActivation`` value vLLM's model code hands FusedMoE
#: (nemotron_h experts are non-gated squared-ReLU: ``activation_without_mul`` -> RELU2_NO_MUL)
VLLM_MOE_ACTIVATION = {"relu2": "relu2_no_mul"}
NON_GATED = ("relu2_no_mul", "silu_no_mul", "gelu_no_mul", "gelu_tanh_no_mul")


@dataclass(frozen=True)
class AttentionKind:
    """One distinct attention layer type as vLLM's selector sees it, and how many layers have it."""

    head_size: int
    num_heads: int
    num_kv_heads: int
    layers: int
    sliding_window: int | None = None
    sink: bool = False
    mla: bool = False
    sparse: bool = False  # MLA with a top-k indexer (DeepSeek-V3.2 ``index_topk``, GLM-5 DSA)
    chunked: bool = False  # chunked local attention (Llama-4 ``attention_chunk_size``)

    @property
    def label(self) -> str:
        """Short name of the kind: ``full``, ``sliding``, ``mla``, ``mla-sparse``, ``chunked`` +
        head size (what a cell's ``details.kinds`` lists)."""
        base = (
            "mla"
            if self.mla
            else ("chunked" if self.chunked else "sliding" if self.sliding_window else "full")
        )
        if self.sparse:
            base += "-sparse"
        sink = "+sink" if self.sink else ""
        return f"{base}{sink} d={self.head_size} h={self.num_heads}/{self.num_kv_heads}"

    def spec(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Routing:
    """The router inputs vLLM's ``get_routing_method_type`` maps to a RoutingMethodType."""

    scoring_func: str = "softmax"
    renormalize: bool = True
    num_expert_group: int | None = None
    has_e_score_bias: bool = False


@dataclass(frozen=True)
class QuantScheme:
    """A checkpoint's quantization as vLLM loads it.

    ``method``: the vLLM quant method it resolves to (``fp8``, ``modelopt_fp4``, ``modelopt_mixed``,
    ``compressed-tensors``, ``gpt_oss_mxfp4`` …; None: unquantized); ``linear``: the scheme of the
    quantized linear layers; ``experts``: the routed experts' own scheme (``bf16`` when the checkpoint
    leaves them out, e.g. via ``modules_to_not_convert`` / ``ignore``); ``kv_cache``: a KV-cache quant
    the checkpoint declares (``fp8``) or None.
    """

    method: str | None
    linear: str
    experts: str | None = None
    kv_cache: str | None = None


@functools.cache
def routing_table() -> dict[str, Any]:
    """probe/data/oracle_routing.json: router inputs per model_type, for the model types whose vLLM
    code fixes them without the config saying so (and for packaged profiles)."""
    data = datafiles.read_json("oracle_routing.json")
    if not isinstance(data, dict) or not isinstance(data.get("model_types"), dict) or "default" not in data:
        raise DataFileError("probe/data/oracle_routing.json: needs 'default' and 'model_types'")
    return data


def routing_defaults(*model_types: str | None) -> dict[str, Any]:
    table = routing_table()
    hit = next((table["model_types"][t] for t in model_types if t and t in table["model_types"]), None)
    return dict(hit or table["default"])


def attention_kind_from_dict(where: str, raw: Any) -> AttentionKind:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object")
    ints = ("head_size", "num_heads", "num_kv_heads", "layers")
    bools = ("sink", "mla", "sparse", "chunked")
    extra = sorted(set(raw) - {*ints, *bools, "sliding_window"})
    if extra:
        raise ValueError(f"{where}: unknown fields {extra}")
    for key in ints:
        if type(raw.get(key)) is not int or raw[key] <= 0:
            raise ValueError(f"{where}.{key}: expected a positive integer")
    for key in bools:
        if key in raw and type(raw[key]) is not bool:
            raise ValueError(f"{where}.{key}: expected true or false")
    window = raw.get("sliding_window")
    if window is not None and (type(window) is not int or window <= 0):
        raise ValueError(f"{where}.sliding_window: expected a positive integer or null")
    return AttentionKind(**raw)
