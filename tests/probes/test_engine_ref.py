"""Engine / attention probe helpers: LLM kwargs, test config, and the SDPA reference (torch optional)."""

from __future__ import annotations

import importlib.util

import pytest

from probe.cell_params import AttentionParams, CellParamsError, EngineParams
from probe.probes.engine import attention_test_config, engine_kwargs


def _attn(**kw: object) -> AttentionParams:
    return AttentionParams.from_wire(
        {"backend": "TRITON_ATTN", "num_heads": 32, "num_kv_heads": 2, "head_dim": 256, **kw}
    )


def test_engine_kwargs_maps_cell_params():
    p = EngineParams.from_wire(
        {"model": "m", "moe_backend": "marlin", "attention_backend": "FLASH_ATTN", "fa_version": 3}
    )
    kw = engine_kwargs(p)
    assert kw["moe_backend"] == "marlin" and kw["attention_backend"] == "FLASH_ATTN"
    assert kw["attention_config"] == {"flash_attn_version": 3}
    assert kw["load_format"] == "dummy" and kw["skip_tokenizer_init"] and kw["enforce_eager"]
    assert kw["max_model_len"] == 1024 and kw["gpu_memory_utilization"] == 0.5  # the typed defaults
    auto = engine_kwargs(
        EngineParams.from_wire({"model": "m", "moe_backend": "auto", "attention_backend": "auto"})
    )
    assert "moe_backend" not in auto and "attention_backend" not in auto and "attention_config" not in auto
    # attention cells name the backend under "backend"
    assert engine_kwargs(_attn())["attention_backend"] == "TRITON_ATTN"
    # the runner's capped gpu_memory_utilization (unified memory) reaches the engine
    assert engine_kwargs(_attn(gpu_memory_utilization=0.25))["gpu_memory_utilization"] == 0.25


def test_params_of_the_wrong_shape_are_refused():
    with pytest.raises(CellParamsError, match="num_heads"):
        AttentionParams.from_wire({"backend": "X", "num_kv_heads": 2, "head_dim": 64})
    with pytest.raises(CellParamsError, match="is not int"):
        _attn(num_heads="32")


def test_attention_test_config_uses_the_head_layout():
    cfg = attention_test_config(_attn(hidden=3072))
    assert cfg["num_attention_heads"] == 32 and cfg["num_key_value_heads"] == 2 and cfg["head_dim"] == 256
    assert cfg["hidden_size"] == 3072 and cfg["num_hidden_layers"] == 1
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed (reference math)")
def test_sdpa_reference_prefill_and_decode():
    import torch
    import torch.nn.functional as F

    from probe.probes.engine import _sdpa_reference

    g = torch.Generator().manual_seed(0)
    t, h, kv, d = 12, 4, 2, 16
    q = torch.randn(t + 2, h, d, generator=g)
    k = torch.randn(t + 2, kv, d, generator=g)
    v = torch.randn(t + 2, kv, d, generator=g)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    full = F.scaled_dot_product_attention(
        q.transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1), is_causal=True
    ).transpose(0, 1)
    calls = [{"q": q[:t], "k": k[:t], "v": v[:t], "out": full[:t], "scale": d**-0.5}]
    for i in (t, t + 1):  # decode steps: one new token each, sees every earlier key
        calls.append(
            {
                "q": q[i : i + 1],
                "k": k[i : i + 1],
                "v": v[i : i + 1],
                "out": full[i : i + 1],
                "scale": d**-0.5,
            }
        )
    control: dict[str, float] = {}
    errs, notes = _sdpa_reference(calls, t, control)
    assert set(errs) == {"prefill", "decode1", "decode2"} and max(errs.values()) < 1e-5 and not notes
    assert control["noncausal_prefill"] > 0.1 and 0 < control["mean_max_attention_prob"] <= 1
    # a backend that ignores the causal mask is caught
    bad = [
        dict(
            calls[0],
            out=F.scaled_dot_product_attention(
                q[:t].transpose(0, 1), kk[:t].transpose(0, 1), vv[:t].transpose(0, 1)
            ).transpose(0, 1),
        )
    ]
    assert _sdpa_reference(bad, t)[0]["prefill"] > 0.1


def test_engine_args_reach_llm_kwargs_typed_like_the_cli():
    kw = engine_kwargs(
        EngineParams.from_wire(
            {
                "model": "m",
                "moe_backend": "marlin",
                "engine_args": {
                    "gdn_prefill_backend": "triton",
                    "max_num_batched_tokens": "2048",
                    "enable_chunked_prefill": "false",
                    "gpu_memory_utilization": "0.3",
                },
            }
        )
    )
    assert kw["gdn_prefill_backend"] == "triton" and kw["max_num_batched_tokens"] == 2048
    assert kw["enable_chunked_prefill"] is False and kw["gpu_memory_utilization"] == 0.3


def test_unknown_engine_args_read_from_the_installed_engine_args(monkeypatch):
    import dataclasses
    import sys
    import types

    from probe.probes.engine import unknown_engine_args

    @dataclasses.dataclass
    class EngineArgs:  # what vLLM 0.26's has, in part
        model: str = ""
        gdn_prefill_backend: str | None = None

    arg_utils = types.ModuleType("vllm.engine.arg_utils")
    arg_utils.EngineArgs = EngineArgs  # type: ignore[attr-defined]
    for name, mod in (("vllm", types.ModuleType("vllm")), ("vllm.engine", types.ModuleType("vllm.engine"))):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setitem(sys.modules, "vllm.engine.arg_utils", arg_utils)
    assert unknown_engine_args({"gdn_prefill_backend": "triton"}) == []
    got = unknown_engine_args(["gdn_prefill_backend", "mamba_backend", "a_flag"])
    assert got == ["a_flag", "mamba_backend"]
