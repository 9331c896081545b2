"""Synthetic config.json dicts (engine probe) against what vLLM 0.26.0 and 0.33.0 require.

The requirements below were read from the vLLM sources (wheels vllm-0.26.0 / vllm-0.33.0,
``vllm/...:line``) and checked once by instantiating vLLM 0.26's own config classes
(``vllm/transformers_utils/configs/{qwen3_5_moe,nemotron_h}.py``) and transformers 5.20.2's classes
(what vLLM 0.33 uses for every type here) on these dicts, and by scanning each model file for the
``config.<attr>`` reads the built config must answer. CI has no vLLM, so the requirements are
encoded here; the last test builds the transformers config when transformers is importable.
"""

from __future__ import annotations

import json
import math

import pytest

from probe.catalog.models import QUANTS, VLLM_QUANT_METHOD, load_profiles, quantization_config
from probe.probes.hf_config import synthetic_hf_config, text_config_of

MOE_PROFILES = [p for p in load_profiles() if p.moe]

# Architectures each vLLM registers (vllm/model_executor/models/registry.py). 0.26 lacks
# Qwen3_5MoeForCausalLM (registry.py:574 has only the ...ForConditionalGeneration entry; 0.33 adds it
# at registry.py:205), hence the multimodal wrapper for qwen3_5_moe.
REGISTERED_BOTH = {
    "DeepseekV3ForCausalLM",  # 0.26 registry.py:92, 0.33 :94
    "Glm4MoeForCausalLM",  # 0.26 :114, 0.33 :124
    "GptOssForCausalLM",  # 0.26 :117, 0.33 :128
    "MixtralForCausalLM",  # 0.26 :170, 0.33 :181
    "NemotronHForCausalLM",  # 0.26 :178, 0.33 :186
    "Qwen3MoeForCausalLM",  # 0.26 :198, 0.33 :203
    "Qwen3_5MoeForConditionalGeneration",  # 0.26 :574, 0.33 :618
}

# Keys the text config must carry explicitly per model type (HF class defaults would otherwise give
# another model's widths silently); read by vllm/model_executor/models/<file> in both versions.
REQUIRED_TEXT_KEYS: dict[str, set[str]] = {
    # qwen3_5.py (0.26 :130/:159/:246, 0.33 :142/:172/:259) + qwen3_next.py
    "qwen3_5_moe": {
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "layer_types",
        "linear_conv_kernel_dim",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "rope_parameters",
        "head_dim",
    },
    "qwen3_moe": {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob"},
    "mixtral": {"num_local_experts", "num_experts_per_tok", "intermediate_size"},
    # gpt_oss.py:157 sliding_window on even layers
    "gpt_oss": {
        "num_local_experts",
        "experts_per_token",
        "intermediate_size",
        "sliding_window",
        "layer_types",
    },
    # deepseek_v2.py:1221 (dense below first_k_dense_replace: intermediate_size), MLA widths
    "deepseek_v3": {
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "n_shared_experts",
        "first_k_dense_replace",
        "intermediate_size",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "n_group",
        "topk_group",
        "routed_scaling_factor",
    },
    # glm4_moe.py:358 / :566
    "glm4_moe": {
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "n_shared_experts",
        "first_k_dense_replace",
        "intermediate_size",
        "partial_rotary_factor",
        "n_group",
        "topk_group",
    },
    # nemotron_h.py (0.33 :597 hybrid_override_pattern[layer_idx]); 0.26 configs/nemotron_h.py:219
    "nemotron_h": {
        "hybrid_override_pattern",
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "moe_shared_expert_intermediate_size",
        "mamba_num_heads",
        "mamba_head_dim",
        "ssm_state_size",
        "n_groups",
        "conv_kernel",
        "expand",
        "mlp_hidden_act",
    },
}
# keys Qwen3_VisionTransformer reads from vision_config (vllm/model_executor/models/qwen3_vl.py
# 0.26 :536-626), even when the tower is skipped (language_model_only builds it on meta)
VISION_KEYS = {
    "hidden_size",
    "num_heads",
    "num_position_embeddings",
    "patch_size",
    "spatial_merge_size",
    "temporal_patch_size",
    "out_hidden_size",
    "in_channels",
    "intermediate_size",
    "hidden_act",
    "depth",
}


def _ids(p):
    return p.slug


@pytest.mark.parametrize("prof", MOE_PROFILES, ids=_ids)
@pytest.mark.parametrize("layers", [1, 2, 3, 4])
def test_moe_profile_configs_meet_vllm_requirements(prof, layers):
    cfg = synthetic_hf_config(prof, num_layers=layers)
    json.dumps(cfg)  # written to config.json as is
    assert cfg["architectures"][0] in REGISTERED_BOTH
    text = text_config_of(cfg)
    mt = prof.text_model_type or prof.model_type
    assert text["model_type"] == mt and text["num_hidden_layers"] == layers
    missing = REQUIRED_TEXT_KEYS[prof.model_type] - set(text)
    assert not missing, f"{prof.name}: {sorted(missing)}"
    # real widths, whatever the key names
    experts = text.get("num_experts") or text.get("n_routed_experts") or text.get("num_local_experts")
    width = text.get("moe_intermediate_size") or text.get("intermediate_size")
    assert (experts, text["num_experts_per_tok"], width) == (
        prof.moe.experts,
        prof.moe.top_k,
        prof.moe.intermediate,
    )
    assert text["hidden_size"] == prof.hidden_size and text["vocab_size"] == prof.vocab_size
    if "layer_types" in text:  # transformers' validate_layer_type: one entry per layer
        assert len(text["layer_types"]) == layers
    if "first_k_dense_replace" in text:  # at least one MoE layer survives the cut
        assert text["first_k_dense_replace"] < layers
    if prof.model_type == "nemotron_h":
        pat = text["hybrid_override_pattern"]
        assert len(pat) == layers and set(pat) <= set("M*-E") and "E" in pat
    if prof.model_type == "gpt_oss":
        assert text["experts_per_token"] == text["num_experts_per_tok"]


@pytest.mark.parametrize("prof", [p for p in MOE_PROFILES if p.model_type == "qwen3_5_moe"], ids=_ids)
@pytest.mark.parametrize("layers", [1, 2, 4, 5])
def test_qwen3_5_moe_is_the_multimodal_config(prof, layers):
    cfg = synthetic_hf_config(prof, num_layers=layers, quant="nvfp4")
    # vllm 0.26 transformers_utils/config.py:127 maps qwen3_5_moe to vLLM's Qwen3_5MoeConfig, which the
    # processor demands (models/qwen3_5.py:110); its text_config is Qwen3_5MoeTextConfig
    assert cfg["model_type"] == "qwen3_5_moe"
    assert cfg["architectures"] == ["Qwen3_5MoeForConditionalGeneration"]
    text, vision = cfg["text_config"], cfg["vision_config"]
    assert text["model_type"] == "qwen3_5_moe_text" and "architectures" not in text
    assert "quantization_config" in cfg and "quantization_config" not in text
    types = text["layer_types"]
    assert set(types) <= {"linear_attention", "full_attention"} and "full_attention" in types
    if layers > 1:
        assert "linear_attention" in types  # both layer kinds kept
    assert not VISION_KEYS - set(vision)
    assert vision["out_hidden_size"] == text["hidden_size"]
    assert math.isqrt(vision["num_position_embeddings"]) ** 2 == vision["num_position_embeddings"]
    assert vision["hidden_size"] % vision["num_heads"] == 0
    rope = text["rope_parameters"]
    rotary = int(text["head_dim"] * rope["partial_rotary_factor"])
    assert sum(rope["mrope_section"]) == rotary // 2  # M-RoPE sections cover rotary_dim / 2
    for tok in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert cfg[tok] < text["vocab_size"]


def test_quantization_configs_have_one_source():
    from probe.probes.moe import QUANT_CONFIGS

    assert set(VLLM_QUANT_METHOD) == set(QUANTS) == set(QUANT_CONFIGS)
    for q in QUANTS:
        method, qdict, _act = QUANT_CONFIGS[q]
        assert method == VLLM_QUANT_METHOD[q] and qdict == quantization_config(q)
    prof = next(p for p in MOE_PROFILES if p.model_type == "qwen3_5_moe")
    nv = synthetic_hf_config(prof, quant="nvfp4")["quantization_config"]
    assert nv == quantization_config("nvfp4", exclude_modules=nv["exclude_modules"])
    assert "*visual*" in nv["exclude_modules"]  # experts only: the vision tower stays bf16
    assert QUANT_CONFIGS["nvfp4"][1]["exclude_modules"] == []


@pytest.mark.parametrize("prof", MOE_PROFILES, ids=_ids)
def test_transformers_builds_the_config(prof):
    transformers = pytest.importorskip(
        "transformers", reason="transformers not installed: HF config classes not checked"
    )
    cfg = json.loads(json.dumps(synthetic_hf_config(prof, num_layers=2)))
    if cfg["model_type"] not in transformers.CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no {cfg['model_type']} config")
    klass = transformers.CONFIG_MAPPING[cfg["model_type"]]
    built = klass(**{k: v for k, v in cfg.items() if k != "model_type"})
    text = built.get_text_config()
    assert text.num_hidden_layers == 2 and text.hidden_size == prof.hidden_size
    if getattr(text, "layer_types", None) is not None:
        assert len(text.layer_types) == 2
    if prof.model_type == "qwen3_5_moe":
        assert type(text).__name__ == "Qwen3_5MoeTextConfig" and text.num_experts == prof.moe.experts
        assert built.vision_config.out_hidden_size == prof.hidden_size


def test_synthetic_config_keeps_every_layer_kind():
    from probe.errors import UsageError
    from probe.modelcfg.resolve import resolve_model

    cfg = synthetic_hf_config(resolve_model("122b"), num_layers=2, quant="nvfp4")
    text = cfg["text_config"]  # Qwen3.5: the multimodal wrapper vLLM 0.26 requires
    assert text["num_hidden_layers"] == 2 and cfg["architectures"] == ["Qwen3_5MoeForConditionalGeneration"]
    assert "full_attention" in text["layer_types"] and "linear_attention" in text["layer_types"]
    assert (text["num_experts"], text["moe_intermediate_size"], text["hidden_size"]) == (256, 1024, 3072)
    assert cfg["quantization_config"]["quant_algo"] == "NVFP4"
    nano = synthetic_hf_config(resolve_model("nano"), num_layers=4)
    assert (
        set(nano["hybrid_override_pattern"]) == {"M", "E", "*"} and len(nano["hybrid_override_pattern"]) == 4
    )
    assert synthetic_hf_config(resolve_model("super"), num_layers=2)["moe_latent_size"] == 1024
    assert "quantization_config" not in synthetic_hf_config(resolve_model("mixtral"))
    assert synthetic_hf_config(resolve_model("dsv3"), quant="fp8_block")["quantization_config"][
        "weight_block_size"
    ] == [128, 128]
    with pytest.raises(UsageError):
        synthetic_hf_config(resolve_model("122b"), quant="int3")


def test_a_reduced_config_splits_wherever_the_model_does():
    """397b at TP 4 failed with "2 is not divisible by 4" in the vision tower of probe's own reduced
    config; every catalog profile's reduced config now splits at TP 2/4/8, and a reduction that would not
    is named as probe's (never as vLLM refusing the set-up)."""
    from probe.catalog.models import load_profiles
    from probe.probes.hf_config import reduction_problems, synthetic_hf_config

    for prof in load_profiles():
        cfg = synthetic_hf_config(prof, num_layers=2)
        real = {
            "num_attention_heads": prof.num_attention_heads,
            "num_key_value_heads": prof.num_key_value_heads,
        }
        for tp in (2, 4, 8):
            if prof.num_attention_heads % tp == 0:
                assert reduction_problems(cfg, real, tp) == [], (prof.name, tp)
    shrunk = {"text_config": {"num_attention_heads": 32}, "vision_config": {"num_heads": 2}}
    assert reduction_problems(shrunk, {"num_attention_heads": 32}, 4) == [
        "vision_config.num_heads=2 is not divisible by TP 4"
    ]
    assert (
        reduction_problems({"num_attention_heads": 6}, {"num_attention_heads": 6}, 4) == []
    )  # the model's own
