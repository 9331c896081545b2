"""Model profiles: packaged facts, resolution by name / config.json / HF cache, synthetic configs."""

from __future__ import annotations

import json

import pytest

from probe.catalog.models import load_profiles
from probe.errors import UsageError
from probe.modelcfg.resolve import resolve_model

REQUIRED = [
    "Qwen3.5-122B-A10B",
    "Qwen3.6-35B-A3B",
    "Qwen3.5-397B-A17B",
    "Qwen3.6-27B",
    "Qwen3.5-4B",
    "Nemotron-3-Nano-30B-A3B",
    "Nemotron-3-Super-120B-A12B",
    "Qwen3-30B-A3B",
    "Mixtral-8x7B",
    "gpt-oss-120b",
    "gpt-oss-20b",
    "DeepSeek-V3",
    "Qwen3-235B-A22B",
    "GLM-4.5-Air",
    "Llama-3.1-8B",
]


def test_catalog_has_the_models_users_run():
    names = {p.name for p in load_profiles()}
    assert set(REQUIRED) <= names
    for p in load_profiles():
        assert p.sources, f"{p.name} has no sources"


@pytest.mark.parametrize(
    ("alias", "name", "experts", "top_k", "hidden", "inter", "quant"),
    [
        ("122b", "Qwen3.5-122B-A10B", 256, 8, 3072, 1024, "nvfp4"),
        ("35b", "Qwen3.6-35B-A3B", 256, 8, 2048, 512, "nvfp4"),
        ("397b", "Qwen3.5-397B-A17B", 512, 10, 4096, 1024, "nvfp4"),
        ("nano", "Nemotron-3-Nano-30B-A3B", 128, 6, 2688, 1856, "nvfp4"),
        ("super", "Nemotron-3-Super-120B-A12B", 512, 22, 4096, 2688, "nvfp4"),
        ("mixtral", "Mixtral-8x7B", 8, 2, 4096, 14336, "bf16"),
        ("gpt-oss-120b", "gpt-oss-120b", 128, 4, 2880, 2880, "mxfp4"),
        ("dsv3", "DeepSeek-V3", 256, 8, 7168, 2048, "fp8_block"),
    ],
)
def test_profile_facts(alias, name, experts, top_k, hidden, inter, quant):
    p = resolve_model(alias)
    assert (p.name, p.moe.experts, p.moe.top_k, p.hidden_size, p.moe.intermediate, p.quant) == (
        name,
        experts,
        top_k,
        hidden,
        inter,
        quant,
    )


def test_shapes_per_tp():
    p = resolve_model("122b")
    assert p.moe_shape(2) == {"experts": 256, "top_k": 8, "hidden": 3072, "intermediate": 512, "tp": 2}
    assert p.attention_shape(2) == {"num_heads": 16, "num_kv_heads": 1, "head_dim": 256, "tp": 2}
    assert (
        resolve_model("super").moe_shape(1)["hidden"] == 1024
    )  # LatentMoE: expert GEMMs at the latent width
    assert resolve_model("nano").moe.activation == "relu2"
    assert resolve_model("dsv3").mla is not None and resolve_model("dsv3").head_dim == 192
    assert resolve_model("Qwen3.6-27B").moe is None
    with pytest.raises(UsageError):
        p.moe_shape(3)


@pytest.mark.parametrize(
    ("text", "name", "quant"),
    [
        ("Qwen/Qwen3.5-122B-A10B", "Qwen3.5-122B-A10B", "nvfp4"),
        ("nvidia/Qwen3.5-122B-A10B-NVFP4", "Qwen3.5-122B-A10B", "nvfp4"),
        ("Qwen/Qwen3.5-122B-A10B-FP8", "Qwen3.5-122B-A10B", "fp8_block"),
        ("Qwen3-30B-A3B-FP8", "Qwen3-30B-A3B", "fp8_block"),
        ("QWEN3.5-122B-A10B", "Qwen3.5-122B-A10B", "nvfp4"),
    ],
)
def test_resolve_names(text, name, quant):
    p = resolve_model(text)
    assert (p.name, p.quant) == (name, quant)


def test_unknown_model_suggests_close_names():
    with pytest.raises(UsageError) as exc:
        resolve_model("qwen3.5-122")
    assert "Qwen3.5-122B-A10B" in str(exc.value) or "qwen3.5-122b" in str(exc.value)


QWEN35_MM = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "hidden_size": 3072,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1024,
        "shared_expert_intermediate_size": 1024,
        "vocab_size": 248320,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 12,
    },
    "vision_config": {"depth": 27},
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
}


def test_config_json_nested_text_config(tmp_path):
    d = tmp_path / "Qwen3.5-122B-custom"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(QWEN35_MM))
    p = resolve_model(str(d))
    assert (p.moe.experts, p.moe.top_k, p.hidden_size, p.attention_layers, p.quant) == (
        256,
        8,
        3072,
        12,
        "nvfp4",
    )
    assert p.text_model_type == "qwen3_5_moe_text" and p.name == "Qwen3.5-122B-custom"
    assert resolve_model(str(d / "config.json")).moe.intermediate == 1024


@pytest.mark.parametrize(
    ("cfg", "experts", "inter", "quant"),
    [
        (
            {
                "model_type": "mixtral",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_local_experts": 8,
                "num_experts_per_tok": 2,
                "intermediate_size": 14336,
                "vocab_size": 32000,
            },
            8,
            14336,
            "bf16",
        ),
        (
            {
                "model_type": "deepseek_v3",
                "hidden_size": 7168,
                "num_hidden_layers": 61,
                "num_attention_heads": 128,
                "n_routed_experts": 256,
                "num_experts_per_tok": 8,
                "moe_intermediate_size": 2048,
                "kv_lora_rank": 512,
                "q_lora_rank": 1536,
                "qk_nope_head_dim": 128,
                "qk_rope_head_dim": 64,
                "v_head_dim": 128,
                "first_k_dense_replace": 3,
                "vocab_size": 129280,
                "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
            },
            256,
            2048,
            "fp8_block",
        ),
        (
            {
                "model_type": "gpt_oss",
                "hidden_size": 2880,
                "num_hidden_layers": 36,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "head_dim": 64,
                "num_local_experts": 128,
                "experts_per_token": 4,
                "intermediate_size": 2880,
                "vocab_size": 201088,
                "swiglu_limit": 7.0,
                "quantization_config": {"quant_method": "mxfp4"},
            },
            128,
            2880,
            "mxfp4",
        ),
    ],
)
def test_config_json_variants(tmp_path, cfg, experts, inter, quant):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    p = resolve_model(str(tmp_path / "config.json"))
    assert (p.moe.experts, p.moe.intermediate, p.quant) == (experts, inter, quant)


def test_bad_config_json(tmp_path):
    """A config given as the model is the user's input: a usage error (exit 2) naming the field."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "x"}))
    with pytest.raises(UsageError, match="num_hidden_layers"):
        resolve_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{nope")
    with pytest.raises(UsageError, match="not a readable JSON config"):
        resolve_model(str(tmp_path))


def test_hf_cache_lookup(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--acme--Mixy-8x1B" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(
        json.dumps(
            {
                "model_type": "mixtral",
                "hidden_size": 1024,
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "num_local_experts": 8,
                "num_experts_per_tok": 2,
                "intermediate_size": 2048,
                "vocab_size": 1000,
            }
        )
    )
    (tmp_path / "hub" / "models--acme--Mixy-8x1B" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--Mixy-8x1B" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    p = resolve_model("acme/Mixy-8x1B")
    assert (p.name, p.moe.experts, p.hidden_size) == ("acme/Mixy-8x1B", 8, 1024)
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert resolve_model("acme/Mixy-8x1B").moe.intermediate == 2048


def test_models_cli(probe_cli):
    r = probe_cli("models")
    assert r.returncode == 0 and "Qwen3.5-122B-A10B" in r.stdout and "122b" in r.stdout
    r = probe_cli("models", "35b", "--tp", "2")
    assert json.loads(r.stdout)["moe_shape"]["intermediate"] == 256
    r = probe_cli("models", "nonsense-model")
    assert r.returncode == 2 and "Traceback" not in r.stderr
