"""The warm pre-pass: which FlashInfer CUTLASS MoE module a GPU needs, which cells wait for which pre-pass
cell, and ``ok`` only for what was really built and loaded."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from probe.cells import CellSpec
from probe.probes import attention_layer, jit_warm


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
    assert warm[0].env == {"FLASHINFER_JIT_VERBOSE": "1"}  # ninja's [N/M] lines reach the parent
    assert jit_warm.warm_specs(specs[:1]) == []
    assert {w.timeout_s for w in jit_warm.warm_specs(specs, limit_s=200.0)} == {200.0}
    needs = jit_warm.warm_needs(specs)
    assert needs["moe/flashinfer_cutlass/mxfp4"] == "warm/flashinfer-moe"
    assert needs["a3"] == needs["a1"] == "warm/FLASHINFER/h=64/kv=8/d=64/sinks"
    assert {"moe/triton/bf16", "e1", "a7"}.isdisjoint(needs)  # no compile to wait for: they run beside


def test_only_the_cutlass_moe_backend_builds_the_cutlass_module():
    """flashinfer_trtllm / _cutedsl do not use the CUTLASS fused-MoE module: no 40-minute build for them;
    an engine on flashinfer_cutlass waits for it as the MoE layer cells do."""
    trtllm = _spec("m1", "moe", "probe.probes.moe:run", backend="flashinfer_trtllm")
    engine = _spec("e", "engine", "probe.probes.engine:run", moe_backend="flashinfer_cutlass",
                   attention_backend="auto")  # fmt: skip
    assert jit_warm.warm_specs([trtllm]) == []
    assert [w.id for w in jit_warm.warm_specs([trtllm, engine])] == ["warm/flashinfer-moe"]
    assert jit_warm.warm_needs([trtllm, engine]) == {"e": "warm/flashinfer-moe"}


def test_cells_vllm_refuses_before_compiling_do_not_wait():
    """flashinfer_cutlass takes NVFP4 only from sm_100, and never fp8_block (the backend catalog): on an H100
    those cells are refused by vLLM's selection at once, so they run beside the pre-pass; with no cell
    left that needs the module, it is not built at all."""
    moe = "probe.probes.moe:run"
    cells = [
        _spec(f"m/{q}", "moe", moe, backend="flashinfer_cutlass", quant=q)
        for q in ("nvfp4", "fp8_block", "bf16")
    ]
    assert set(jit_warm.warm_needs(cells, sm=90)) == {"m/bf16"}
    assert set(jit_warm.warm_needs(cells, sm=100)) == {"m/nvfp4", "m/bf16"}
    assert set(jit_warm.warm_needs(cells)) == {"m/nvfp4", "m/bf16"}  # GPU unknown: it may need it
    assert jit_warm.warm_specs(cells[:2], sm=90) == []


class _Ctx:
    def __init__(self) -> None:
        self.notes: dict[str, Any] = {}
        self.phases: list[str] = []

    def phase(self, name: str) -> None:
        self.phases.append(name)

    def note(self, key: str, value: Any) -> None:
        self.notes[key] = value


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """A torch that sees an sm_90 GPU and a FlashInfer whose MoE module builds (or fails to load)."""
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: True, get_device_capability=lambda i=0: (9, 0))
    monkeypatch.setitem(sys.modules, "torch", torch)
    state: dict[str, Any] = {"load_error": None, "built": 0}

    class Spec:
        name = "fused_moe_90"
        sources = [Path(f"/src/k{i}.cu") for i in range(3)]
        aot_path = tmp_path / "aot" / "fused_moe_90.so"
        jit_library_path = tmp_path / "jit" / "fused_moe_90.so"
        ninja_path = tmp_path / "jit" / "build.ninja"

        def build_and_load(self) -> object:
            state["built"] += 1
            if state["load_error"]:
                raise state["load_error"]
            return object()

    fused = types.ModuleType("flashinfer.jit.fused_moe")
    fused.gen_cutlass_fused_moe_sm90_module = Spec  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.jit", types.ModuleType("flashinfer.jit"))
    monkeypatch.setitem(sys.modules, "flashinfer.jit.fused_moe", fused)
    return state


def test_the_moe_module_is_ok_only_once_built_and_loaded(fake_gpu):
    ctx = _Ctx()
    r = jit_warm.run({"flashinfer_moe": True}, ctx)
    assert r["outcome"] == "ok" and r["details"]["flashinfer_moe"]["loaded"] is True
    assert r["details"]["flashinfer_moe"]["units"] == 4
    assert ctx.notes["jit_build_file"].endswith("build.ninja") and "3 translation units" in ctx.notes["jit"]
    fake_gpu["load_error"] = ImportError("fused_moe_90.so: undefined symbol: _ZN3c104cuda9SetDevice")
    with pytest.raises(ImportError):  # the sandbox classifies it (import_error): never "ok"
        jit_warm.run({"flashinfer_moe": True}, _Ctx())


def test_an_attention_backend_that_does_not_import_is_not_ok(fake_gpu, monkeypatch):
    def no_fa(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        raise ImportError("cannot import name 'flash_attn_varlen_func' from 'vllm.vllm_flash_attn'")

    monkeypatch.setattr(attention_layer, "run", no_fa)
    cell = {"backend": "FLASH_ATTN", "fa_version": 2, "num_heads": 8, "num_kv_heads": 8, "head_dim": 64}
    with pytest.raises(ImportError):
        jit_warm.run({"attention_cells": [cell]}, _Ctx())

    def refused(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"outcome": "unsupported", "reason": "FA4 needs sm_100"}

    monkeypatch.setattr(attention_layer, "run", refused)
    r = jit_warm.run({"attention_cells": [{**cell, "fa_version": 4}]}, _Ctx())
    assert r["outcome"] == "unsupported" and "FA4 needs sm_100" in r["root_cause"]
