"""What the plan says before a run: whether FlashInfer's CUTLASS MoE module is built already (a cold build
is ~40 min), what a cell compiles by its backend's nature."""

from __future__ import annotations

from probe.run.planning import compiles_itself, flashinfer_moe_built
from tests.run.conftest import cell


def test_a_built_flashinfer_moe_module_is_found(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "home"))
    site = tmp_path / "site-packages"
    site.mkdir()
    assert flashinfer_moe_built([str(site)], 90) is None
    jit = tmp_path / "home" / ".cache" / "flashinfer" / "0.6.14" / "90" / "cached_ops" / "fused_moe_90"
    jit.mkdir(parents=True)
    (jit / "fused_moe_90.so").write_bytes(b"")
    assert flashinfer_moe_built([str(site)], 90) == str(jit)
    assert flashinfer_moe_built([str(site)], 100) is None  # another GPU needs fused_moe_100
    aot = site / "flashinfer" / "data" / "aot" / "fused_moe_100"
    aot.mkdir(parents=True)
    (aot / "fused_moe_100.so").write_bytes(b"")
    assert flashinfer_moe_built([str(site)], 100) == str(aot)
    assert flashinfer_moe_built([str(site)], None) is None


def test_what_a_cell_compiles_by_its_backend():
    assert compiles_itself(cell("a", "moe", backend="triton")) == "Triton kernels"
    assert compiles_itself(cell("b", "moe", backend="flashinfer_cutlass")) == "JIT module"
    assert compiles_itself(cell("c", "attention", backend="FLASH_ATTN", fa_version=4)) == "CuTe DSL kernels"
    assert compiles_itself(cell("c", "attention", backend="FLASH_ATTN", fa_version=3)) is None
    assert compiles_itself(cell("d", "moe", backend="marlin")) is None
    assert compiles_itself(cell("e", "engine", moe_backend="triton")) is None


def _plan(budget_s, monkeypatch, tmp_path):
    from probe.probes.planner import PlanOptions, build_plan
    from probe.run import RunOptions
    from probe.run.order import Priorities, focus_of
    from probe.run.planning import make_plan

    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path))  # no FlashInfer MoE module built
    specs = build_plan(PlanOptions(models=("35b",), experts=(8,), tp=(1,), kinds=("moe", "attention")))
    opts = RunOptions(
        cells=tuple(specs), warm_jit=True, budget_s=budget_s, priorities=Priorities(focus_of(["35b"]))
    )
    return make_plan(opts, None, {"cc": "9.0"}, [str(tmp_path)])


def test_a_compile_longer_than_the_budget_is_not_started_and_says_how_to_build_it(monkeypatch, tmp_path):
    from probe.run.planning import budget_line, skipped_waits

    plan = _plan(180.0, monkeypatch, tmp_path)
    moe = next(w for w in plan.warm if w.spec.id == "warm/flashinfer-moe")
    assert moe.skip and "not started" in moe.skip and "flashinfer_aot.py" in moe.skip
    assert all(w.skip is None for w in plan.warm if w.spec.id != moe.spec.id)  # a layout's warm-up fits
    waiting = skipped_waits(plan)
    assert waiting and set(waiting.values()) == {moe.spec.id}
    assert all("flashinfer_cutlass" in cid for cid in waiting)
    cut, line = budget_line(plan, 180.0, 1)
    assert cut is not None and "cells fit" in line
    unlimited = _plan(None, monkeypatch, tmp_path)
    assert all(w.skip is None for w in unlimited.warm)


def test_estimates_come_from_the_published_history(monkeypatch, tmp_path):
    from probe.run.estimates import group_of

    plan = _plan(600.0, monkeypatch, tmp_path)
    assert plan.estimates.label == "history" and plan.estimates.sources
    assert {c.basis for c in plan.cells} & {"history", "history group"}
    assert group_of("engine", {"moe_backend": "auto", "attention_backend": "auto"}) == "engine/auto+auto"
    par = {
        "moe_backend": "auto",
        "attention_backend": "auto",
        "tensor_parallel_size": 2,
        "enable_expert_parallel": True,
    }
    assert group_of("engine", par) == "engine/auto+auto/tp=2/ep"


def test_a_multi_gpu_engine_gets_its_deadline_from_history():
    from probe.run.planning import multi_gpu_deadline

    tp2 = cell("e", "engine", moe_backend="auto", attention_backend="auto", tensor_parallel_size=2)
    tp2 = tp2.model_copy(update={"timeout_s": 900.0})
    assert multi_gpu_deadline(tp2, 120.0, "history").timeout_s == 480.0
    assert multi_gpu_deadline(tp2, 30.0, "history group").timeout_s == 300.0  # never under 5 min
    assert multi_gpu_deadline(tp2, 120.0, "default").timeout_s == 900.0  # no history: its own limit
    one = cell("f", "engine", moe_backend="auto", attention_backend="auto")
    assert multi_gpu_deadline(one, 10.0, "history") is one
    dp2 = cell("g", "engine", moe_backend="auto", attention_backend="auto", data_parallel_size=2)
    assert multi_gpu_deadline(dp2.model_copy(update={"timeout_s": 900.0}), 90.0, "history").timeout_s == 360.0


def test_dp_cells_group_by_all2all_and_a_cell_that_declined_is_timed():
    from probe.run.estimates import _measured, group_of

    dp = {
        "moe_backend": "auto",
        "attention_backend": "auto",
        "data_parallel_size": 2,
        "enable_expert_parallel": True,
        "engine_args": {"all2all_backend": "deepep_low_latency"},
    }
    assert group_of("engine", dp) == "engine/auto+auto/dp=2/ep/deepep_low_latency"
    declined = {"outcome": "not_run", "wall_s": 0.6, "root_cause": "all2all backend x needs deep_ep (…)"}
    assert _measured(declined)
    assert not _measured({**declined, "root_cause": "run budget: needs ~75 s, 60 s left: not started"})
    assert not _measured({**declined, "root_cause": "compile budget exceeded after 207 s"})
    assert not _measured({**declined, "wall_s": 0.0})
