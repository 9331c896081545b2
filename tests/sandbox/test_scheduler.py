"""The scheduler's admission (no children started): typed grants, exclusivity, memory shares."""

from __future__ import annotations

from probe.cell_params import CellBudget, EngineParams, MoeParams
from probe.cells import CellSpec
from probe.sandbox.config import RunnerConfig
from probe.sandbox.memory import GIB, MemoryPolicy
from probe.sandbox.scheduler import RunReport, Scheduler, params_for_child

UNIFIED = MemoryPolicy(
    unified=True, reserve_gib=1, reserve_frac=0.0, meminfo={"MemTotal": 64 * GIB, "MemAvailable": 33 * GIB}
)


def _engine(cid: str) -> CellSpec:
    budget = CellBudget(timeout_s=600, mem_gib=40.0, exclusive=True)
    return CellSpec.make(cid, "x:y", EngineParams(model="m"), budget, isolate=True)


def _moe(cid: str, mem: float = 2.0) -> CellSpec:
    params = MoeParams(backend="triton", experts=8, hidden=64, intermediate=64)
    return CellSpec.make(cid, "x:y", params, CellBudget(mem_gib=mem))


def _sched(specs: list[CellSpec], memory: MemoryPolicy, jobs: int = 4) -> Scheduler:
    return Scheduler(specs, RunnerConfig(jobs=jobs, memory=memory), lambda r: None, RunReport())


def test_an_exclusive_cell_runs_alone_on_unified_memory_too():
    s = _sched([_engine("e"), _moe("m")], UNIFIED)
    spec, grant = s.take(None)
    assert spec.id == "e" and grant.exclusive and grant.share is not None
    assert s._pick(None) is None  # nothing starts beside the engine
    s.release(grant)
    assert s._pick(None) is not None


def test_discrete_budget_grants_and_releases_the_estimate():
    s = _sched([_moe("a", 6.0), _moe("b", 6.0)], MemoryPolicy(budget_gib=10, worker_overhead_gib=0))
    _spec, grant = s.take(None)
    assert (grant.reserved_gib, grant.exclusive, grant.share, grant.note()) == (6.0, False, None, {})
    assert s._pick(None) is None  # 6 + 6 > 10
    s.release(grant)
    assert s.running_mem == 0.0 and s._pick(None) is not None


def test_unified_grant_reaches_the_child_and_the_journal_note():
    s = _sched([_moe("a")], UNIFIED, jobs=1)
    s.cfg.rss_cap_bytes = 1 << 30
    _, grant = s.take(None)
    assert grant.gpu_memory_utilization == 0.5  # (33 - 1) / 64
    assert grant.child_limits() == {"mem_share_gib": 32.0, "gpu_memory_utilization": 0.5}
    note = grant.note()
    assert note["rss_cap_bytes"] == float(1 << 30)  # the runner's own cap is lower than the share
    assert list(note)[:2] == ["mem_share_gib", "gpu_memory_utilization"]
    wire = params_for_child(_moe("b"), grant)
    assert wire["gpu_memory_utilization"] == 0.5 and "gpu_memory_utilization" not in _moe("b").params


def test_a_later_tier_waits_for_an_earlier_cell_whose_module_is_due_soon():
    """Answer first: the engine check does not take the slot while the model's attention layout finishes
    warming (due within HOLD_S); a quick cell still fills the gap, and a module due much later holds
    nothing."""
    from probe.sandbox.config import Budget
    from probe.sandbox.prereq import Prerequisites

    specs = [_moe("attn"), _engine("engine"), _moe("quick")]
    tiers = {"attn": 8, "engine": 12, "quick": 13}
    est = {"attn": 20.0, "engine": 75.0, "quick": 0.1}

    def sched(due_s: float) -> Scheduler:
        pre = Prerequisites({"attn": "warm/x"}, {"warm/x": due_s})
        cfg = RunnerConfig(jobs=1, memory=MemoryPolicy(budget_gib=100), tiers=tiers, prerequisites=pre,
                           budget=Budget(1e12, est))  # fmt: skip
        return Scheduler(specs, cfg, lambda r: None, RunReport())

    soon = sched(30.0)
    spec, _grant = soon._pick(None)
    assert spec.id == "quick"  # the engine is held, the quick cell is not
    assert soon._pick(None) is None
    soon.cfg.prerequisites.settle("warm/x")
    assert soon._pick(None)[0].id == "attn"
    late = sched(3600.0)
    assert late._pick(None)[0].id == "engine"  # a 1-hour compile holds nothing
