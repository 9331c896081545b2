"""Data-parallel expert-parallel engine cells: the plan (one cell per all2all backend, GPU gating, ids,
budgets), the child's all2all pre-check from the catalog, the rank supervision (a failed rank stops the
others, a hung rank is stopped) and how the ranks' reports become the cell's outcome. No vLLM needed:
the ranks here are real spawned processes that behave as a failing / hanging / healthy rank does."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from importlib import metadata

import pytest

from probe.cell_params import EngineParams
from probe.cli.plan_args import add_plan_arguments, plan_options
from probe.errors import OptionError, UsageError
from probe.outcomes import StackFailure
from probe.probes import engine_dp
from probe.probes.common import LocalContext
from probe.probes.planner import MULTI_GPU_ENGINE_TIMEOUT_S, PlanOptions, all2all_names, build_plan


def _plan(**kw):
    return build_plan(PlanOptions(kinds=("engine",), models=("120b", "8b"), **kw))


def test_dp_cells_one_per_all2all_backend_of_moe_models_only() -> None:
    base = _plan()
    assert _plan(engine_dp=(2,), visible_gpus=1) == base  # too few GPUs: not planned
    dp = [s for s in _plan(engine_dp=(2,), visible_gpus=2) if s not in base]
    names = all2all_names()
    assert "allgather_reducescatter" in names and "deepep_low_latency" in names
    assert len(dp) == len(names)  # gpt-oss-120b only (Qwen3-8B is dense), the first pairing only
    first = dp[0]
    assert first.id == "engine/gpt-oss-120b/mxfp4/auto+auto/all2all_backend=allgather_reducescatter/dp=2/ep"
    assert first.params["data_parallel_size"] == 2 and first.params["enable_expert_parallel"] is True
    assert "tensor_parallel_size" not in first.params and first.params["gpus"] == 2
    assert first.budget.timeout_s == MULTI_GPU_ENGINE_TIMEOUT_S and first.budget.exclusive


def test_dp_cells_take_the_named_backends_and_pairs() -> None:
    from probe.cli.plan_args import parse_pairs

    specs = _plan(
        engine_dp=(2,),
        visible_gpus=0,
        force_multi_gpu=True,
        all2all=("naive",),
        pairs=parse_pairs("marlin:TRITON_ATTN"),
    )
    dp = [s.id for s in specs if "/dp=" in s.id]
    assert dp == ["engine/gpt-oss-120b/mxfp4/marlin+TRITON_ATTN/all2all_backend=naive/dp=2/ep"]
    with pytest.raises(OptionError, match="all2all"):
        _plan(engine_dp=(2,), visible_gpus=2, all2all=("bogus",))


def test_cli_flags_reach_the_plan(monkeypatch) -> None:
    monkeypatch.setattr("probe.sandbox.gpu_procs.visible_gpu_count", lambda: 2)
    parser = argparse.ArgumentParser()
    add_plan_arguments(parser)
    args = parser.parse_args(["--kinds", "engine", "--engine-dp", "2", "--all2all", "deepep_low_latency"])
    opts = plan_options(args)
    assert opts.engine_dp == (2,) and opts.all2all == ("deepep_low_latency",) and opts.visible_gpus == 2
    with pytest.raises(UsageError, match="--engine-dp"):
        plan_options(parser.parse_args(["--engine-dp", "two"]))


def _params(name: str) -> EngineParams:
    return EngineParams(
        model="120b", data_parallel_size=2, enable_expert_parallel=True, engine_args={"all2all_backend": name}
    )


@pytest.mark.parametrize(
    ("name", "vllm", "outcome", "words"),
    [
        ("allgather_reducescatter", "0.26.0", None, ""),
        ("naive", "0.26.0", "skipped", "no longer has"),
        ("naive", "0.17.1", None, ""),
        ("deepep_v2", "0.22.0", "skipped", "added in 0.24.0"),
        ("mori_low_latency", "0.26.0", "skipped", "ROCM"),
        ("deepep_low_latency", "0.26.0", "not_run", "needs deep_ep"),
        ("moonep", "0.33.0", "skipped", "not covered"),
    ],
)
def test_all2all_precheck(monkeypatch, name, vllm, outcome, words) -> None:
    monkeypatch.setattr(engine_dp.metadata, "version", lambda dist: vllm)
    monkeypatch.setattr(engine_dp.importlib.util, "find_spec", lambda module: None)
    got = engine_dp.all2all_precheck(_params(name))
    if outcome is None:
        assert got is None
    else:
        assert got["outcome"] == outcome and words in got["reason"], got["reason"]


def test_all2all_precheck_without_vllm_leaves_it_to_the_engine(monkeypatch) -> None:
    def missing(dist: str) -> str:
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(engine_dp.metadata, "version", missing)
    assert engine_dp.all2all_precheck(_params("allgather_reducescatter")) is None


def _fake_rank(rank: int, behaviour: str, box) -> None:
    """A stand-in rank: reports like rank_main does, then fails, hangs or exits."""
    box.put({"rank": rank, "status": "started", "init_s": 0.1})
    if behaviour == "error":
        box.put(
            {"rank": rank, "status": "error", "error": "RuntimeError: NCCL error: unhandled system error"}
        )
        raise SystemExit(1)
    if behaviour == "hang":
        time.sleep(3600)
    if behaviour == "die":
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    box.put({"rank": rank, "status": "ok", "init_s": 0.1, "timings": {"tokens_per_s": 5.0}, "info": {}})


def _supervise(monkeypatch, behaviours: list[str]):
    monkeypatch.setattr(engine_dp, "FAILED_RANK_GRACE_S", 1.0)
    spawn = mp.get_context("spawn")
    box = spawn.Queue()
    procs = [spawn.Process(target=_fake_rank, args=(r, b, box)) for r, b in enumerate(behaviours)]
    for p in procs:
        p.start()
    reports = engine_dp.collect(procs, box, LocalContext())
    return reports, procs


def test_a_failed_rank_stops_a_hung_one(monkeypatch) -> None:
    reports, procs = _supervise(monkeypatch, ["error", "hang"])
    assert all(p.exitcode is not None for p in procs)  # nothing left behind
    assert reports[0]["status"] == "error"
    with pytest.raises(StackFailure, match="rank 0 of 2 failed: RuntimeError: NCCL error"):
        engine_dp.rank_outcome(_params("allgather_reducescatter"), reports, [p.exitcode for p in procs], {})


def test_the_rank_that_failed_is_blamed_not_the_one_stopped_for_it(monkeypatch) -> None:
    reports, procs = _supervise(monkeypatch, ["hang", "error"])
    assert all(p.exitcode is not None for p in procs)
    assert reports[0]["status"] == "stopped" and reports[1]["status"] == "error"
    with pytest.raises(StackFailure, match="rank 1 of 2 failed: RuntimeError: NCCL error"):
        engine_dp.rank_outcome(_params("allgather_reducescatter"), reports, [p.exitcode for p in procs], {})
    only_stopped = {0: {"status": "stopped"}, 1: {"status": "ok"}}
    with pytest.raises(StackFailure, match="rank 0 of 2 gave no result: still running after another rank"):
        engine_dp.rank_outcome(_params("allgather_reducescatter"), only_stopped, [-15, 0], {})


def test_a_rank_killed_by_a_signal_is_the_cells_failure(monkeypatch) -> None:
    reports, procs = _supervise(monkeypatch, ["ok", "die"])
    assert all(p.exitcode is not None for p in procs)
    with pytest.raises(StackFailure, match="rank 1 of 2 gave no result: signal 9"):
        engine_dp.rank_outcome(_params("allgather_reducescatter"), reports, [p.exitcode for p in procs], {})


def test_healthy_ranks_end_ok(monkeypatch) -> None:
    reports, procs = _supervise(monkeypatch, ["ok", "ok"])
    assert [p.exitcode for p in procs] == [0, 0]
    got = engine_dp.rank_outcome(_params("allgather_reducescatter"), reports, [0, 0], {})
    assert got["outcome"] == "ok" and got["timings"]["tokens_per_s"] == 5.0


def _report(status: str, **kw) -> dict:
    return {"status": status, "init_s": 2.0, "timings": {}, "info": {"tokens": [[1, 2]]}, **kw}


def test_rank_outcomes() -> None:
    p = _params("flashinfer_all2allv")
    hung = {0: _report("ok")}
    with pytest.raises(StackFailure, match="rank 1 of 2 gave no result: still running"):
        engine_dp.rank_outcome(p, hung, [0, None], {})
    wrong = {0: _report("ok"), 1: _report("wrong_output", problem="non-finite logprobs")}
    got = engine_dp.rank_outcome(p, wrong, [0, 0], {})
    assert got["outcome"] == "wrong_output" and got["reason"] == "data-parallel rank 1: non-finite logprobs"
    replaced = {r: _report("ok", all2all_backend="flashinfer_nvlink_two_sided") for r in (0, 1)}
    got = engine_dp.rank_outcome(p, replaced, [0, 0], {})
    assert got["outcome"] == "skipped" and "replaced all2all backend flashinfer_all2allv" in got["reason"]
    split = {0: _report("ok"), 1: {**_report("ok"), "info": {"tokens": [[3]]}}}
    got = engine_dp.rank_outcome(_params("allgather_reducescatter"), split, [0, 0], {})
    assert got["outcome"] == "ok" and any("different tokens" in d for d in got["degraded_reasons"])
