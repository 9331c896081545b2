"""The warm pre-pass: which FlashInfer CUTLASS MoE module a GPU needs."""

from __future__ import annotations

import pytest

from probe.cells import CellSpec
from probe.probes import jit_warm


@pytest.mark.parametrize(
    ("sm", "name"),
    [
        (90, "gen_cutlass_fused_moe_sm90_module"),
        (100, "gen_cutlass_fused_moe_sm100_module"),
        (103, "gen_cutlass_fused_moe_sm103_module"),
        (110, "gen_cutlass_fused_moe_sm100_module"),
        (120, "gen_cutlass_fused_moe_sm120_module"),
        (121, "gen_cutlass_fused_moe_sm120_module"),
        (89, "gen_cutlass_fused_moe_sm89_module"),
        (80, None),
    ],
)
def test_moe_module_per_gpu(sm, name):
    assert jit_warm.moe_spec_name(sm) == name


def _spec(cid: str, kind: str, target: str, **params) -> CellSpec:
    return CellSpec.model_validate({"id": cid, "kind": kind, "target": target, "params": params})


def test_warm_specs_one_per_module_group():
    layer = "probe.probes.attention_layer:run"
    fi = dict(backend="FLASHINFER", num_heads=64, num_kv_heads=8, head_dim=64, sinks=True)
    specs = [
        _spec("moe/triton/bf16", "moe", "probe.probes.moe:run", backend="triton"),
        _spec("moe/flashinfer_cutlass/mxfp4", "moe", "probe.probes.moe:run", backend="flashinfer_cutlass"),
        _spec("a1", "attention", layer, **fi),
        _spec("a2", "attention", layer, **fi, sliding_window=128),
        _spec("a3", "attention", layer, **{**fi, "fa_version": None}),  # same layout as a1
        _spec("a4", "attention", layer, backend="TRITON_ATTN", num_heads=8, num_kv_heads=8, head_dim=64),
        _spec("e1", "attention", "probe.probes.engine:run_attention", backend="FLASHINFER", num_heads=8),
    ]
    specs.append(
        _spec("a5", "attention", layer, backend="FLASH_ATTN", fa_version=3, num_heads=8, head_dim=64)
    )
    specs.append(
        _spec("a6", "attention", layer, backend="FLASH_ATTN", fa_version=4, num_heads=8, head_dim=64)
    )
    specs.append(_spec("a7", "attention", layer, backend="FLASHMLA", num_heads=8, head_dim=576))
    warm = jit_warm.warm_specs(specs)
    assert [w.id for w in warm] == [
        "warm/flashinfer-moe",
        "warm/FLASHINFER/h=64/kv=8/d=64/sinks",
        "warm/FLASHINFER/h=64/kv=8/d=64/sinks/sw=128",
        "warm/TRITON_ATTN/h=8/kv=8/d=64",
        "warm/FLASH_ATTN/fa3/h=8/kv=None/d=64",  # FA2/FA3 may run from PTX (driver JIT) on this GPU
        "warm/FLASH_ATTN/fa4/h=8/kv=None/d=64",
    ]  # a backend that ships compiled code (FLASHMLA) and engine cells are not warmed
    assert warm[0].params == {"flashinfer_moe": True}
    assert warm[1].params["attention_cells"][0]["head_dim"] == 64
    assert all(w.isolate and w.timeout_s >= 1200 and w.target == jit_warm.WARM_TARGET for w in warm)
    assert jit_warm.warm_specs(specs[:1]) == []
