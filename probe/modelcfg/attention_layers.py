"""Per-layer attention of a Hugging Face config, as vLLM's model code builds it (no vLLM imported).

Each decoder layer is one of: an attention layer (``full``, ``sliding``, ``chunked``; MLA when the
model is one of vLLM's DeepSeek-style MLA types), a layer without a KV cache (Mamba-2, gated
delta-net, linear attention: counted under vLLM's ``mamba_type`` name), or neither (an MLP-only
block). Sources, as vLLM and the transformers config classes it loads use them:

* ``hybrid_override_pattern`` (nemotron_h: ``M`` Mamba-2, ``*`` attention), ``layers_block_type``,
  ``attn_type_list`` (MiniMax: 1 attention, 0 lightning linear attention), ``hybrid_layer_pattern``
  (MiMo-V2: 1 sliding), ``linear_attn_config.full_attn_layers`` (Kimi-Linear, 1-based),
  ``block_configs`` (Nemotron-NAS: per-layer KV groups, ``no_op`` layers), ``no_rope_layers`` +
  ``attention_chunk_size`` (Llama-4: RoPE layers use chunked local attention);
* ``layer_types`` (``full_attention`` / ``sliding_attention`` / ``linear_attention``), or the
  default its transformers class builds (Qwen2/3: ``use_sliding_window`` + ``max_window_layers``;
  Gemma-3/4: every 6th layer global, the last one forced global);
* per-kind shapes: Gemma-4 global layers use ``global_head_dim`` (transformers' default 512) and,
  with ``attention_k_eq_v``, ``num_global_key_value_heads``; MiMo-V2 sliding layers the ``swa_*``
  sizes; Laguna ``num_attention_heads_per_layer``; sinks on every gpt-oss layer and on MiMo-V2's
  layers per ``add_{swa,full}_attention_sink_bias``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from probe.catalog.layer_kinds import AttentionKind
from probe.modelcfg.values import Cfg

# vLLM ModelArchConfigConvertorBase.is_deepseek_mla: these model types use MLA when kv_lora_rank is set
MLA_TYPES = frozenset({"axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp", "dots3_note",
                       "k3_dspark", "glm5_next", "glm5_next_text", "glm_moe_dsa", "glm4_moe_lite",
                       "kimi_k2", "kimi_linear", "longcat_flash", "pangu_ultra_moe", "bailing_hybrid",
                       "hy_v4"})  # fmt: skip
SPARSE_MLA_TYPES = frozenset({"deepseek_v32", "glm_moe_dsa", "glm5_next", "glm5_next_text"})  # + index_topk
GDN_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "kimi_linear")
QWEN_SW_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
# DeepSeek-V4 attention does not go through vLLM's generic attention selector: its own class picks
# FlashMLA / FlashInfer sparse MLA (vllm/models/deepseek_v4/nvidia/model.py _select_dsv4_attn_cls)
CUSTOM_ATTENTION = {"deepseek_v4": "custom:DeepseekV4Attention"}


@dataclass(frozen=True)
class LayerPlan:
    kinds: tuple[AttentionKind, ...]
    mixers: tuple[tuple[str, int], ...]

    @property
    def attention_layers(self) -> int:
        return sum(k.layers for k in self.kinds)


def _gemma_types(cfg: Cfg, n: int) -> list[str]:
    types = cfg.opt_texts("layer_types") or [
        "sliding_attention" if (i + 1) % (cfg.opt_int("sliding_window_pattern") or 6) else "full_attention"
        for i in range(n)
    ]
    if cfg.data.get("model_type", "").startswith("gemma4") and types and types[-1] != "full_attention":
        types = [*types[:-1], "full_attention"]  # transformers' Gemma4TextConfig forces the last layer global
    return types


def _from_layer_types(types: list[str], model_type: str) -> list[str]:
    out = []
    for t in types:
        t = t.lower()
        if "linear" in t:
            out.append("mixer:gdn_attn" if model_type in GDN_TYPES else "mixer:linear_attention")
        elif "sliding" in t:
            out.append("sliding")
        elif "chunk" in t:
            out.append("chunked")
        elif "mamba" in t:
            out.append("mixer:mamba2")
        elif "attention" in t or t == "full":
            out.append("full")
        else:
            out.append("none")
    return out


def _pattern_types(cfg: Cfg, model_type: str, n: int) -> list[str] | None:
    """Per-layer types from the hybrid-model fields (None when the config has none of them)."""
    if isinstance(cfg.data.get("hybrid_override_pattern"), str):
        pat = cfg.data["hybrid_override_pattern"]
        return ["mixer:mamba2" if c == "M" else "full" if c == "*" else "none" for c in pat]
    if isinstance(cfg.data.get("layers_block_type"), list):
        mamba = "mixer:mamba2" if model_type == "nemotron_h" else "mixer:mamba1"
        kinds = {"attention": "full", "mamba": mamba, "hybrid": "full"}
        return [kinds.get(str(t), "none") for t in cfg.data["layers_block_type"]]
    if (attn := cfg.opt_ints("attn_type_list")) is not None:
        return ["full" if t == 1 else "mixer:linear_attention" for t in attn]
    if (pattern := cfg.opt_ints("hybrid_layer_pattern")) is not None:
        return ["sliding" if t == 1 else "full" for t in pattern]
    lin = cfg.data.get("linear_attn_config")
    if isinstance(lin, dict) and isinstance(lin.get("full_attn_layers"), list):
        full = {int(x) for x in lin["full_attn_layers"]}
        return ["full" if i + 1 in full else "mixer:gdn_attn" for i in range(n)]
    if isinstance(cfg.data.get("block_configs"), list):
        blocks = cfg.data["block_configs"]
        return ["none" if ((b or {}).get("attention") or {}).get("no_op") else "full" for b in blocks]
    return None


def layer_types(cfg: Cfg, model_type: str, n: int) -> list[str]:
    """One entry per layer: ``full`` / ``sliding`` / ``chunked`` / ``none`` / ``mixer:<mamba_type>``."""
    pattern = _pattern_types(cfg, model_type, n)
    if pattern is not None:
        return pattern
    if model_type.startswith(("gemma2", "gemma3", "gemma4")):
        return _from_layer_types(_gemma_types(cfg, n), model_type)
    if (types := cfg.opt_texts("layer_types")) is not None:
        return _from_layer_types(types, model_type)
    if model_type in GDN_TYPES and (every := cfg.opt_int("full_attention_interval")):
        return ["full" if (i + 1) % every == 0 else "mixer:gdn_attn" for i in range(n)]  # Qwen3NextConfig
    if model_type.startswith("llama4") and cfg.opt_int("attention_chunk_size"):
        nope = cfg.opt_ints("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(n)]
        return ["chunked" if r else "full" for r in nope]
    if model_type in QWEN_SW_TYPES and cfg.flag("use_sliding_window", False) and sliding_window(cfg):
        first = cfg.opt_int("max_window_layers", minimum=0)
        first = 28 if first is None else first  # Qwen2Config's default
        return ["sliding" if i >= first else "full" for i in range(n)]
    return ["full"] * n


def sliding_window(cfg: Cfg) -> int | None:
    window = cfg.opt_int("sliding_window", "sliding_window_size", minimum=0)
    if not window:  # vLLM: a window of 0 means none
        return None
    if cfg.data.get("use_bidirectional_attention") == "all":  # Gemma-4 halves it (exclusive bounds)
        return window // 2 + 1
    return window


def _kind(cfg: Cfg, model_type: str, i: int, t: str, base: dict[str, Any]) -> dict[str, Any]:
    """The attention kind of layer ``i`` (type ``t``)."""
    k = dict(base)
    if t == "sliding":
        k["sliding_window"] = sliding_window(cfg)
    if (per_layer := cfg.opt_ints("num_attention_heads_per_layer", minimum=1)) is not None:
        k["num_heads"] = per_layer[i]
    if model_type.startswith("gemma4") and t == "full":
        k["head_size"] = cfg.opt_int("global_head_dim") or 512
        if cfg.flag("attention_k_eq_v", False) and cfg.opt_int("num_global_key_value_heads"):
            k["num_kv_heads"] = cfg.need_int("num_global_key_value_heads")
    if model_type == "mimo_v2_flash":
        if t == "sliding":
            k["head_size"] = cfg.opt_int("swa_head_dim") or k["head_size"]
            k["num_heads"] = cfg.opt_int("swa_num_attention_heads") or k["num_heads"]
            k["num_kv_heads"] = cfg.opt_int("swa_num_key_value_heads") or k["num_kv_heads"]
        k["sink"] = cfg.flag(
            "add_swa_attention_sink_bias" if t == "sliding" else "add_full_attention_sink_bias", False
        )
    if isinstance(cfg.data.get("block_configs"), list):
        group = ((cfg.data["block_configs"][i] or {}).get("attention") or {}).get("n_heads_in_group") or 1
        k["num_kv_heads"] = k["num_heads"] // cfg.checked_int(f"block_configs[{i}].n_heads_in_group", group)
    k["chunked"] = t == "chunked"
    return k


def _base(cfg: Cfg, model_type: str, heads: int, hidden: int) -> dict[str, Any]:
    mla = model_type in MLA_TYPES and cfg.data.get("kv_lora_rank") is not None
    if mla:
        head = cfg.need_int("kv_lora_rank") + cfg.need_int("qk_rope_head_dim")
        kv = 1
    else:
        head = cfg.opt_int("head_dim", minimum=0) or cfg.opt_int("hidden_size_per_head") or hidden // heads
        kv = cfg.opt_int("num_key_value_heads") or heads
    return {
        "head_size": head,
        "num_heads": heads,
        "num_kv_heads": kv,
        "sliding_window": None,
        "sink": model_type == "gpt_oss",
        "mla": mla,
        "sparse": mla and model_type in SPARSE_MLA_TYPES and cfg.data.get("index_topk") is not None,
        "chunked": False,
    }


def read_layers(cfg: Cfg, model_type: str, n: int, heads: int, hidden: int) -> LayerPlan:
    """The distinct attention kinds (with layer counts) and the KV-less layers of a text config."""
    if model_type in CUSTOM_ATTENTION:
        return LayerPlan(kinds=(), mixers=((CUSTOM_ATTENTION[model_type], n),))
    types = layer_types(cfg, model_type, n)
    if len(types) != n:
        raise cfg.bad("num_hidden_layers", f"is {n} but the per-layer list has {len(types)} entries")
    base = _base(cfg, model_type, heads, hidden)
    kinds: Counter[tuple[tuple[str, Any], ...]] = Counter()
    mixers: Counter[str] = Counter()
    for i, t in enumerate(types):
        if t.startswith("mixer:"):
            mixers[t[len("mixer:") :]] += 1
        elif t != "none":
            kinds[tuple(sorted(_kind(cfg, model_type, i, t, base).items()))] += 1
    return LayerPlan(
        kinds=tuple(AttentionKind(**dict(k), layers=c) for k, c in kinds.most_common()),
        mixers=tuple(sorted(mixers.items())),
    )
