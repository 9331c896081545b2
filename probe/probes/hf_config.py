"""Synthetic HF ``config.json`` dicts for the engine probe: a model profile cut to a few layers.

``synthetic_hf_config(profile, num_layers=2, quant=...)`` keeps the profile's real layer widths and
every layer kind it has (MoE, full attention, linear attention / Mamba) where ``num_layers`` allows,
plus a ``quantization_config`` that puts the routed experts in ``quant``. Only the engine probe (in the
sandboxed child) and its tests use it.
"""

from __future__ import annotations

import copy
from typing import Any

from probe.catalog.models import ModelProfile, quantization_config
from probe.errors import UsageError

_EXPERT_ONLY_EXCLUDES: dict[str, list[str]] = {
    "default": [
        "lm_head",
        "*self_attn*",
        "*shared_expert*",
        "*mlp.gate",
        "*linear_attn*",
        "*visual*",
        "*mtp*",
    ],
    "nemotron_h": [
        "lm_head",
        "*mixer.q_proj*",
        "*mixer.k_proj*",
        "*mixer.v_proj*",
        "*mixer.o_proj*",
        "*mixer.in_proj*",
        "*mixer.out_proj*",
        "*mixer.conv1d*",
        "*mixer.gate*",
        "*shared_experts*",
    ],
}


def _quantization_config(profile: ModelProfile, quant: str) -> dict[str, Any] | None:
    """:func:`quantization_config` with the routed experts alone quantized (NVFP4 excludes the rest)."""
    excludes = _EXPERT_ONLY_EXCLUDES.get(profile.model_type, _EXPERT_ONLY_EXCLUDES["default"])
    return quantization_config(quant, exclude_modules=excludes if quant == "nvfp4" else None)


def _nemotron_pattern(n: int) -> str:
    if n == 1:
        return "E"
    if n == 2:
        return "*E"
    if n == 3:
        return "M*E"
    return ("ME*E" + "ME" * n)[:n]


def _base_config(profile: ModelProfile, mt: str, num_layers: int) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": [profile.vllm_text_architecture or (profile.architectures or ["?"])[0]],
        "model_type": mt,
        "hidden_size": profile.hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": profile.num_attention_heads,
        "num_key_value_heads": profile.num_key_value_heads,
        "head_dim": profile.head_dim,
        "vocab_size": profile.vocab_size,
        "max_position_embeddings": min(profile.max_context or 4096, 8192),
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "hidden_act": "silu",
    }
    if profile.dense_intermediate:
        cfg["intermediate_size"] = profile.dense_intermediate
    return cfg


def _qwen_hybrid_fields(profile: ModelProfile, mt: str, num_layers: int) -> dict[str, Any]:
    """Qwen3.5 / Qwen3-Next: Gated-DeltaNet layers with a full-attention layer every 4th."""
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(num_layers)]
    if "full_attention" not in types:
        types[-1] = "full_attention"
    hy = profile.hybrid or {}
    out: dict[str, Any] = {
        "layer_types": types,
        "full_attention_interval": 4,
        "partial_rotary_factor": 0.25,
        "attn_output_gate": True,
        "linear_conv_kernel_dim": hy.get("gdn_conv_kernel", 4),
        "linear_key_head_dim": hy.get("gdn_key_head_dim", 128),
        "linear_value_head_dim": hy.get("gdn_value_head_dim", 128),
        "linear_num_key_heads": hy.get("gdn_linear_num_key_heads", 16),
        "linear_num_value_heads": hy.get("gdn_linear_num_value_heads", 32),
        "mtp_num_hidden_layers": 0,
    }
    if mt.startswith("qwen3_5"):
        # Qwen3.5's text model rotates with interleaved M-RoPE over 1/4 of head_dim (the HF
        # config's text_config.rope_parameters); the three sections sum to rotary_dim / 2
        half = int(profile.head_dim * 0.25) // 2
        sec = (half + 2) // 3
        out["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": 10_000_000,
            "partial_rotary_factor": 0.25,
            "mrope_section": [sec, sec, half - 2 * sec],
            "mrope_interleaved": True,
        }
    else:
        out["rope_theta"] = 10_000_000
    return out


def _moe_fields(profile: ModelProfile, mt: str, num_layers: int) -> dict[str, Any]:
    """The MoE block's config keys, in the naming of each model family."""
    moe = profile.moe
    assert moe is not None
    if mt in ("mixtral", "gpt_oss"):
        out: dict[str, Any] = {
            "num_local_experts": moe.experts,
            "num_experts_per_tok": moe.top_k,
            "intermediate_size": moe.intermediate,
        }
        if mt == "gpt_oss":
            layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
            out.update(
                {
                    "experts_per_token": moe.top_k,
                    "swiglu_limit": 7.0,
                    "sliding_window": 128,
                    "layer_types": layer_types,
                }
            )
        return out
    if mt in ("deepseek_v3", "glm4_moe", "nemotron_h"):
        return {
            "n_routed_experts": moe.experts,
            "num_experts_per_tok": moe.top_k,
            "moe_intermediate_size": moe.intermediate,
            "n_shared_experts": moe.shared_experts,
            "norm_topk_prob": True,
        }
    out = {
        "num_experts": moe.experts,
        "num_experts_per_tok": moe.top_k,
        "moe_intermediate_size": moe.intermediate,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }
    if moe.shared_intermediate:
        out["shared_expert_intermediate_size"] = moe.shared_intermediate
    return out


def _family_fields(profile: ModelProfile, mt: str, num_layers: int) -> dict[str, Any]:
    """DeepSeek-V3 (MLA, grouped routing) and GLM-4 MoE specifics."""
    if mt == "deepseek_v3" and profile.mla:
        return {
            **profile.mla.to_dict(),
            "first_k_dense_replace": 1 if num_layers > 1 else 0,
            "n_group": 8,
            "topk_group": 4,
            "scoring_func": "sigmoid",
            "topk_method": "noaux_tc",
            "routed_scaling_factor": 2.5,
            "num_nextn_predict_layers": 0,
            "moe_layer_freq": 1,
        }
    if mt == "glm4_moe":
        return {
            "first_k_dense_replace": 1 if num_layers > 1 else 0,
            "partial_rotary_factor": 0.5,
            "attention_bias": True,
            "n_group": 1,
            "topk_group": 1,
            "routed_scaling_factor": 1.0,
            "num_nextn_predict_layers": 0,
        }
    return {}


def _nemotron_fields(cfg: dict[str, Any], profile: ModelProfile, num_layers: int) -> None:
    """Nemotron-H (Mamba2 + MoE + attention): the layer pattern and the Mamba widths, in place."""
    moe = profile.moe
    assert moe is not None
    hy = profile.hybrid or {}
    cfg.update(
        {
            "hybrid_override_pattern": _nemotron_pattern(num_layers),
            "mlp_hidden_act": "relu2",
            "moe_shared_expert_intermediate_size": moe.shared_intermediate,
            "mamba_num_heads": hy.get("mamba_num_heads", 64),
            "mamba_head_dim": hy.get("mamba_head_dim", 64),
            "ssm_state_size": hy.get("ssm_state_size", 128),
            "n_groups": hy.get("n_groups", 8),
            "conv_kernel": hy.get("conv_kernel", 4),
            "expand": hy.get("expand", 2),
            "n_group": 1,
            "topk_group": 1,
        }
    )
    cfg.pop("n_shared_experts", None)
    if moe.latent_size:
        cfg["moe_latent_size"] = moe.latent_size


def synthetic_hf_config(
    profile: ModelProfile, num_layers: int = 2, quant: str | None = None
) -> dict[str, Any]:
    """An HF config.json dict with the profile's real layer widths, cut to ``num_layers``.

    Text-only (the architecture vLLM registers for the text model), except for multimodal families
    whose text model vLLM builds only inside the multimodal class (Qwen3.5 / 3.6): those get the
    full multimodal config with the text model under ``text_config`` and a minimal
    ``vision_config`` (see ``_VISION_WRAPPED``); use :func:`text_config_of` to read the text part.

    Every layer kind the model has (MoE, full attention, linear attention / Mamba) is kept at least
    once where ``num_layers`` allows. ``quant`` (default: the profile's) adds a
    ``quantization_config`` that puts the routed experts in that format.
    """
    if num_layers < 1:
        raise UsageError("num_layers must be >= 1")
    q = quant or profile.quant
    mt = profile.text_model_type or profile.model_type
    cfg = _base_config(profile, mt, num_layers)
    if mt.startswith("qwen3_5") or mt == "qwen3_next":
        cfg.update(_qwen_hybrid_fields(profile, mt, num_layers))
    if profile.moe:
        cfg.update(_moe_fields(profile, mt, num_layers))
    cfg.update(_family_fields(profile, mt, num_layers))
    if mt == "nemotron_h" and profile.moe:
        _nemotron_fields(cfg, profile, num_layers)
    if profile.model_type in _VISION_WRAPPED and mt != profile.model_type:
        cfg = _vision_wrapped(profile, cfg)
    qc = _quantization_config(profile, q)
    if qc:
        cfg["quantization_config"] = qc
    return copy.deepcopy(cfg)


# Multimodal model types whose text model vLLM only builds inside the multimodal class: vLLM 0.26
# registers no ``Qwen3_5MoeForCausalLM`` (vllm/model_executor/models/registry.py) and maps the
# architecture name to ``Qwen3_5MoeForConditionalGeneration``, whose processor demands the full
# ``Qwen3_5MoeConfig`` (text_config + vision_config). vLLM 0.33 registers both. The synthetic config
# is therefore the multimodal one (with a small vision tower the engine probe never builds: it passes
# ``language_model_only=True``), which both versions accept.
_VISION_WRAPPED: dict[str, str] = {
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
}


#: the config fields tensor parallelism splits across ranks (a reduced config must keep them divisible)
_SPLIT_FIELDS = ("num_attention_heads", "num_key_value_heads", "num_heads", "linear_num_key_heads",
                 "linear_num_value_heads", "mamba_num_heads", "n_groups")  # fmt: skip


def reduction_problems(config: dict[str, Any], real: dict[str, Any], tp: int) -> list[str]:
    """Where probe's reduced ``config`` cannot be split ``tp`` ways although the model's own numbers
    (``real``, by field name) can: a failure there would be probe's, not vLLM's. Text and vision parts
    are both read; a KV-head count below ``tp`` is replicated by vLLM, not split."""
    out = []
    for part, sub in (("", text_config_of(config)), ("vision_config.", config.get("vision_config") or {})):
        for name in _SPLIT_FIELDS:
            value = sub.get(name)
            if not isinstance(value, int) or value <= 0 or tp <= 1:
                continue
            if name == "num_key_value_heads" and value < tp:
                continue
            if value % tp and not (isinstance(real.get(name), int) and real[name] % tp):
                out.append(f"{part}{name}={value} is not divisible by TP {tp}")
    return out


def text_config_of(config: dict[str, Any]) -> dict[str, Any]:
    """The text model's part of a config.json dict (``text_config`` when nested)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def _vision_wrapped(profile: ModelProfile, text: dict[str, Any]) -> dict[str, Any]:
    arch = next(
        (a for a in profile.architectures if a.endswith("ForConditionalGeneration")),
        _VISION_WRAPPED[profile.model_type],
    )
    text = {k: v for k, v in text.items() if k != "architectures"}
    return {
        "architectures": [arch],
        "model_type": profile.model_type,
        "text_config": text,
        # a small valid Qwen3-VL vision tower: 1 block of 16 heads of 64 (rotary over half of each
        # head; 16 heads split evenly at every TP size up to 16), merger projecting to the text hidden
        # size; 2304 = 48^2 position embeddings
        "vision_config": {
            "model_type": profile.model_type,
            "depth": 1,
            "hidden_size": 1024,
            "num_heads": 16,
            "intermediate_size": 2048,
            "hidden_act": "gelu_pytorch_tanh",
            "in_channels": 3,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": profile.hidden_size,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [],
        },
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
