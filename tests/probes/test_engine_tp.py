"""Tensor- / expert-parallel engine cells: planning (GPU gating, ids, budgets, wire parameters), the
LLM(...) arguments and the child's pre-checks (no vLLM needed)."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from probe.cell_params import CellBudget, CellKind, EngineParams, cell_shape
from probe.cells import CellSpec
from probe.cli.plan_args import add_plan_arguments, engine_tp_sizes, plan_options
from probe.errors import OptionError
from probe.probes.engine_build import engine_kwargs, parallel_skip_reason
from probe.probes.planner import MULTI_GPU_ENGINE_TIMEOUT_S, PlanOptions, build_plan, check_options

FOUR = ("122b", "35b", "nano", "120b")


def _engine_plan(**kw) -> list[CellSpec]:
    opts = PlanOptions(kinds=("engine",), models=FOUR, **kw)
    return build_plan(opts)


def test_tp2_cells_only_with_two_visible_gpus() -> None:
    base = _engine_plan()
    assert base and all("/tp=" not in s.id for s in base)
    assert _engine_plan(engine_tp=(1, 2), visible_gpus=1) == base
    assert _engine_plan(engine_tp=(1, 2), visible_gpus=None) == base
    two = _engine_plan(engine_tp=(1, 2), visible_gpus=2)
    forced = _engine_plan(engine_tp=(1, 2), visible_gpus=0, force_multi_gpu=True)
    assert [s.id for s in two] == [s.id for s in forced]
    assert len(two) == 3 * len(base)  # every TP=1 cell gets a TP=2 and a TP=2 + EP twin (all four are MoE)


def test_tp2_and_ep_cells_ids_budget_and_wire() -> None:
    specs = {s.id: s for s in _engine_plan(engine_tp=(2,), visible_gpus=2, pairs=None)}
    for slug, quant in (
        ("qwen3.5-122b-a10b", "nvfp4"),
        ("qwen3.6-35b-a3b", "nvfp4"),
        ("nemotron-3-nano-30b-a3b", "nvfp4"),
        ("gpt-oss-120b", "mxfp4"),
    ):
        tp = specs[f"engine/{slug}/{quant}/auto+auto/tp=2"]
        ep = specs[f"engine/{slug}/{quant}/auto+auto/tp=2/ep"]
        for s in (tp, ep):
            assert s.kind is CellKind.ENGINE and s.isolate
            assert s.budget == CellBudget(
                timeout_s=MULTI_GPU_ENGINE_TIMEOUT_S, mem_gib=40.0, exclusive=True, gpus=2
            )
            assert s.params["tensor_parallel_size"] == 2 and s.params["gpus"] == 2
            assert s.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
        assert "enable_expert_parallel" not in tp.params
        assert ep.params["enable_expert_parallel"] is True
    assert not any(s.id.endswith(("+auto", "ATTN")) for s in specs.values())  # TP=1 not asked for


def test_tp1_cells_keep_their_historical_parameters() -> None:
    spec = _engine_plan()[0]
    assert spec.id == "engine/qwen3.5-122b-a10b/nvfp4/auto+auto"
    assert list(spec.params) == [
        "model", "moe_backend", "attention_backend", "fa_version", "quant", "layers", "mem_gib", "exclusive",
    ]  # fmt: skip
    assert spec.budget.gpus == 1


def test_dense_model_gets_no_expert_parallel_variant() -> None:
    specs = build_plan(
        PlanOptions(kinds=("engine",), models=("llama-8b",), engine_tp=(2,), force_multi_gpu=True)
    )
    assert specs and all(s.id.endswith("/tp=2") for s in specs)


def test_tp_size_the_model_cannot_shard_is_not_planned() -> None:
    # nano has 2 KV heads of 32 query heads; TP=64 cannot shard it
    specs = build_plan(
        PlanOptions(kinds=("engine",), models=("nano",), engine_tp=(64,), force_multi_gpu=True)
    )
    assert specs == []


def test_engine_tp_option_checked() -> None:
    with pytest.raises(OptionError):
        check_options(PlanOptions(engine_tp=(0,)))


def test_engine_tp_flag() -> None:
    assert engine_tp_sizes("auto", None) == (1,)
    assert engine_tp_sizes("auto", 1) == (1,)
    assert engine_tp_sizes("auto", 2) == (1, 2)
    assert engine_tp_sizes("auto", 4) == (1, 2, 4)
    assert engine_tp_sizes("auto", 8) == (1, 2, 4, 8)
    assert engine_tp_sizes("1,2", 0) == (1, 2)
    parser = argparse.ArgumentParser()
    add_plan_arguments(parser)
    opts = plan_options(parser.parse_args(["--kinds", "engine", "--engine-tp", "2", "--force-multi-gpu"]))
    assert opts.engine_tp == (2,) and opts.force_multi_gpu
    opts = plan_options(parser.parse_args(["--kinds", "moe"]))
    assert opts.engine_tp == (1,) and opts.visible_gpus is None  # nvidia-smi not asked without engine cells


def test_engine_kwargs_and_prechecks() -> None:
    p = EngineParams(model="nano", tensor_parallel_size=2, enable_expert_parallel=True)
    kw = engine_kwargs(p)
    assert kw["tensor_parallel_size"] == 2 and kw["enable_expert_parallel"] is True
    assert "tensor_parallel_size" not in engine_kwargs(EngineParams(model="nano"))
    names = {"tensor_parallel_size", "enable_expert_parallel"}
    assert parallel_skip_reason(p, 2, names) is None
    assert parallel_skip_reason(p, 1, names) == "tensor_parallel_size=2 needs 2 GPUs; torch sees 1"
    why = parallel_skip_reason(p, 2, {"tensor_parallel_size"})
    assert why is not None and "enable_expert_parallel" in why
    assert parallel_skip_reason(EngineParams(model="nano"), 1, set()) is None


def test_wire_round_trip_and_matrix_shape() -> None:
    p = EngineParams(model="nano", tensor_parallel_size=2, enable_expert_parallel=True)
    wire = p.to_wire(CellBudget(mem_gib=40.0, exclusive=True, gpus=2))
    assert wire["gpus"] == 2 and list(wire)[-1] == "gpus"
    back = EngineParams.from_wire(wire)
    assert back == p and back.effective_tp == 2 and back.expert_parallel
    assert cell_shape(CellKind.ENGINE, wire).tp == 2
    assert cell_shape(CellKind.ENGINE, replace(p, tensor_parallel_size=None).to_wire()).tp is None
    assert cell_shape(CellKind.MOE, {"tp": 4, "tensor_parallel_size": 2}).tp == 4
