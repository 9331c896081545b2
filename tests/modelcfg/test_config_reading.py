"""Reading a config.json the way vLLM does: facts of real configs, and every bad number a usage error.

The real configs are tests/data/configs/<model>/ (sources in SOURCES.json). A config given with
``--model`` is user input: a missing, zero, negative, fractional or non-finite value of a field
probe uses exits 2 with the field's name (never an OSError / ZeroDivisionError / OverflowError,
never "bad matrix" exit 6, never a silent "dense" for an expert count of -8).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.errors import EXIT_USAGE, UsageError
from probe.modelcfg.config_reader import profile_from_config, profile_from_path
from probe.modelcfg.layer_spec import layer_spec
from probe.modelcfg.quant_scheme import experts_excluded

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"


def read(folder: str):
    return profile_from_path(DATA / folder)


def test_gemma4_moe_reads_its_two_attention_kinds_and_top_k_experts():
    p = read("google--gemma-4-26B-A4B")
    kinds = {(k.head_size, k.num_heads, k.num_kv_heads, k.sliding_window, k.layers) for k in p.layer_kinds()}
    assert kinds == {(256, 16, 8, 1024, 25), (512, 16, 2, None, 5)}  # global layers: global_head_dim
    assert (p.moe.experts, p.moe.top_k, p.moe.intermediate, p.moe.activation) == (128, 8, 704, "gelu_tanh")
    nvfp4 = read("nvidia--Gemma-4-26B-A4B-NVFP4")
    assert nvfp4.quant == "nvfp4" and nvfp4.quant_scheme.method == "modelopt_fp4"
    assert read("nvidia--Gemma-4-31B-IT-NVFP4").moe is None  # num_experts: null is dense


def test_the_experts_quant_can_differ_from_the_model():
    qwen = read("nvidia--Qwen3.6-35B-A3B-NVFP4")  # MIXED_PRECISION: W4A16 NVFP4 experts, FP8 elsewhere
    assert (qwen.quant_scheme.method, qwen.quant_scheme.linear, qwen.moe.scheme) == (
        "modelopt_mixed",
        "fp8",
        "nvfp4_w4a16",
    )
    assert qwen.quant == "nvfp4" and "nvfp4_w4a16" in (qwen.quant_note or "")
    gpt = read("openai--gpt-oss-120b")
    assert (gpt.quant_scheme.method, gpt.quant_scheme.linear, gpt.moe.scheme) == (
        "gpt_oss_mxfp4",
        "bf16",
        "mxfp4",
    )
    kimi = read("moonshotai--Kimi-K2.5")  # compressed-tensors pack-quantized int4 on Linear (experts too)
    assert kimi.moe.scheme == "int4_w4a16" and kimi.layer_kinds()[0].mla
    dsv4 = read("deepseek-ai--DeepSeek-V4-Flash")  # fp8 checkpoint whose experts are FP4 (expert_dtype)
    assert (dsv4.quant_scheme.method, dsv4.moe.scheme) == ("deepseek_v4_fp8", "mxfp4")


def test_non_gated_activation_sparse_mla_and_hybrids():
    nano = read("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert (
        layer_spec(nano)["moe"][0]["activation"] == "relu2_no_mul" and not layer_spec(nano)["moe"][0]["gated"]
    )
    assert dict(nano.mixer_layers) == {"mamba2": 23} and nano.attention_layers == 6
    (v32,) = read("deepseek-ai--DeepSeek-V3.2").layer_kinds()
    assert (v32.mla, v32.sparse, v32.head_size, v32.num_kv_heads) == (True, True, 576, 1)
    assert dict(read("Qwen--Qwen3-Next-80B-A3B-Thinking").mixer_layers) == {"gdn_attn": 36}


def test_nemotron_nas_follows_vllms_rule():
    """vLLM cannot read this one without the repository's custom code; its nemotron_nas.py builds an
    attention layer for each block whose attention is not ``no_op``, with heads // n_heads_in_group
    KV heads — checked here against the config itself."""
    raw = json.loads((DATA / "nvidia--Llama-3_3-Nemotron-Super-49B-v1" / "config.json").read_text())
    blocks = [b["attention"] for b in raw["block_configs"]]
    want: dict[int, int] = {}
    for b in blocks:
        if not b["no_op"]:
            kv = raw["num_attention_heads"] // b["n_heads_in_group"]
            want[kv] = want.get(kv, 0) + 1
    got = {k.num_kv_heads: k.layers for k in read("nvidia--Llama-3_3-Nemotron-Super-49B-v1").layer_kinds()}
    assert got == want and sum(got.values()) < len(blocks)


def test_experts_left_out_by_an_exclusion_list_stay_unquantized():
    base = json.loads((DATA / "Qwen--Qwen3-30B-A3B-FP8" / "config.json").read_text())
    assert profile_from_config(base, name="x", origin="t").moe.scheme == "fp8_block"
    every_layer = [f"model.layers.{i}.mlp.experts" for i in range(base["num_hidden_layers"])]
    qc = dict(base["quantization_config"], modules_to_not_convert=every_layer)
    p = profile_from_config({**base, "quantization_config": qc}, name="x", origin="t")
    assert (p.quant_scheme.linear, p.moe.scheme, p.quant) == ("fp8_block", "bf16", "bf16")
    assert experts_excluded(["*mlp.experts*"], 3) and not experts_excluded(["*shared_expert*", "lm_head"], 3)


BASE = json.loads((DATA / "Qwen--Qwen3-30B-A3B" / "config.json").read_text())
BAD = [
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"num_attention_heads": -4}, "num_attention_heads"),
    ({"hidden_size": float("inf")}, "hidden_size"),
    ({"hidden_size": float("nan")}, "hidden_size"),
    ({"num_hidden_layers": 2.5}, "num_hidden_layers"),
    ({"num_hidden_layers": True}, "num_hidden_layers"),
    ({"num_experts": -8}, "num_experts"),
    ({"num_experts": 0}, "num_experts"),
    ({"num_experts": 8.5}, "num_experts"),
    ({"num_experts": "many"}, "num_experts"),
    ({"num_experts_per_tok": 300}, "num_experts_per_tok"),
    ({"num_experts_per_tok": None}, "num_experts_per_tok"),
    ({"moe_intermediate_size": -1}, "moe_intermediate_size"),
    ({"head_dim": float("-inf")}, "head_dim"),
    ({"num_key_value_heads": 0}, "num_key_value_heads"),
    ({"hidden_size": None}, "hidden_size"),
    ({"layer_types": ["full_attention"] * 3}, "num_hidden_layers"),
]


@pytest.mark.parametrize(("change", "field"), BAD)
def test_a_bad_number_is_a_usage_error_naming_the_field(change, field):
    with pytest.raises(UsageError, match=field) as err:
        profile_from_config({**BASE, **change}, name="bad", origin="bad/config.json")
    assert err.value.exit_code == EXIT_USAGE


def test_a_window_the_layers_use_is_checked():
    gemma = json.loads((DATA / "google--gemma-4-26B-A4B" / "config.json").read_text())
    with pytest.raises(UsageError, match="sliding_window"):
        profile_from_config(
            {**gemma, "text_config": {**gemma["text_config"], "sliding_window": -1}}, name="bad", origin="bad"
        )


def test_numbers_probe_does_not_use_are_not_judged():
    """A real Nemotron-H config carries ``time_step_limit: [0.0, Infinity]``: not probe's business."""
    p = profile_from_config({**BASE, "time_step_limit": [0.0, float("inf")]}, name="ok", origin="ok")
    assert p.moe.experts == 128


def _write(tmp_path: Path, cfg: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(cfg))  # floats inf / nan as Infinity / NaN
    return str(tmp_path)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"hidden_size": float("inf")}, "hidden_size"),
        ({"moe_intermediate_size": float("nan")}, "moe_intermediate_size"),
        ({"num_experts": -8}, "num_experts"),
        ({"num_hidden_layers": None}, "num_hidden_layers"),
    ],
)
def test_recommend_exits_2_naming_the_field(probe_cli, tmp_path, change, field):
    r = probe_cli("recommend", "--model", _write(tmp_path, {**BASE, **change}), "--gpu", "sm_90")
    assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("x" * 10_000, "unknown model"),  # too long for a file name: the OS would raise
        ("a/" + "b" * 10_000, "unknown model"),  # looks like an HF id
        ("qwen3.5-122b-a10" + "x" * 5000, "did you mean: Qwen3.5-122B-A10B"),
    ],
)
def test_recommend_with_a_huge_or_unknown_name_exits_2_with_close_names(probe_cli, name, said):
    r = probe_cli("recommend", "--model", name, "--gpu", "sm_90")
    assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr) < 1000  # the name is shortened, not echoed whole


def test_a_gemma4_config_without_vllms_checks_says_what_is_missing(probe_cli):
    """Gemma-4's gelu experts and d=512 global layers are in no published check and were never measured
    (the layer probe runs gated SiLU experts; the H100 matrix measured d=256 only): no answer from
    evidence of other activations or head sizes, and the answer says how to get vLLM's own."""
    r = probe_cli("recommend", "--model", str(DATA / "google--gemma-4-26B-A4B"), "--gpu", "sm_90")
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "no evidence for the moe half" in r.stdout and "--ask-vllm" in r.stdout


@pytest.mark.slow
def test_ask_vllm_reads_a_config_model_through_the_images_vllm(probe_cli, tmp_path, fake_vllm_python):
    """``--ask-vllm PY`` runs the oracle for the model on the GPU now: a config model gets vLLM's own
    per-kind verdicts (the fake vLLM takes head sizes <= 256: FLASH_ATTN refuses Gemma-4's d=512 layers)."""
    env = {"PROBE_CACHE_DIR": str(tmp_path / "cache")}
    args = ("recommend", "--model", str(DATA / "google--gemma-4-26B-A4B"), "--gpu", "sm_90", "--json",
            "--ask-vllm", fake_vllm_python, "--matrix", str(tmp_path))  # fmt: skip
    r = probe_cli(*args, env=env)
    assert "Traceback" not in r.stderr, r.stderr
    out = json.loads(r.stdout)
    assert out["vllm_version"] and out["attention_backend"] != "FLASH_ATTN"
    fa = next(x for x in out["ruled_out"] if x["backend"] == "FLASH_ATTN")
    assert fa["source"] == "vllm_check" and "head_size" in fa["reason"]
    again = probe_cli(*args, env=env)  # cached: the same answer without asking again
    assert json.loads(again.stdout)["attention_backend"] == out["attention_backend"]


def test_models_shows_the_per_layer_reading(probe_cli):
    r = probe_cli("models", str(DATA / "google--gemma-4-26B-A4B"), "--layers")
    assert r.returncode == 0
    assert "sliding d=256 h=16/8" in r.stdout and "full d=512 h=16/2" in r.stdout and "top-8" in r.stdout
    r = probe_cli("models", str(DATA / "nvidia--Qwen3.6-35B-A3B-NVFP4"))
    data = json.loads(r.stdout)
    assert data["layers"]["mixers"] == {"gdn_attn": 30} and data["quant_scheme"]["experts"] == "nvfp4_w4a16"
