"""The runner under a time budget, with cells that wait for a prerequisite, value tiers and heartbeats
(real sandboxed children)."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from probe.cells import CellSpec
from probe.outcomes import Outcome
from probe.sandbox.config import Budget, Heartbeat
from probe.sandbox.prereq import Prerequisites
from probe.sandbox.runner import run_cells
from tests.sandbox.conftest import M

J = "tests.sandbox.children.jit_child:"


def _spec(cid: str, target: str, *, env: dict[str, str] | None = None, timeout_s: float = 60, **params):
    raw = {"id": cid, "kind": "fixture", "target": target, "params": params, "timeout_s": timeout_s}
    return CellSpec.model_validate({**raw, "env": env or {}})


def _by_id(rep):
    return {r.id: r for r in rep.results}


@pytest.mark.slow
def test_the_budget_stops_the_cell_in_flight_and_starts_nothing_after(cfg):
    t0 = time.monotonic()
    cfg = dataclasses.replace(cfg, budget=Budget(deadline=t0 + 4.0), jit_timeout_s=0.0)
    specs = [_spec("a-ok", M + "ok"), _spec("b-hang", M + "hang"), _spec("c-ok", M + "ok")]
    rep = run_cells(specs, cfg)
    took = time.monotonic() - t0
    got = _by_id(rep)
    assert got["a-ok"].outcome is Outcome.OK
    b = got["b-hang"]
    assert b.outcome is Outcome.NOT_RUN and not b.outcome.failed
    assert b.root_cause.startswith("run budget spent: stopped after ") and "phase forward" in b.root_cause
    c = got["c-ok"]
    assert c.outcome is Outcome.NOT_RUN and c.root_cause == "run budget spent: not started"
    assert not rep.not_run and took < 4.0 + cfg.grace_s + 5


@pytest.mark.slow
def test_a_compile_stopped_by_the_budget_says_how_far_it_got(cfg, tmp_path):
    cfg = dataclasses.replace(cfg, budget=Budget(deadline=time.monotonic() + 6.0))
    spec = _spec("build", J + "builds", units=30, step_s=0.4, build_dir=str(tmp_path))
    r = run_cells([spec], cfg).results[0]
    assert r.outcome is Outcome.NOT_RUN and r.phase == "jit"
    assert r.root_cause.startswith("compile budget exceeded after ")
    assert " of 31 units built" in r.root_cause and r.root_cause.endswith("the run's time budget was spent")


def test_a_cell_whose_estimate_exceeds_what_is_left_is_not_started(cfg):
    budget = Budget(deadline=time.monotonic() + 60, estimates={"big": 600.0, "small": 1.0})
    cfg = dataclasses.replace(cfg, budget=budget)
    rep = run_cells([_spec("big", M + "ok"), _spec("small", M + "ok")], cfg)
    got = _by_id(rep)
    assert got["big"].outcome is Outcome.NOT_RUN
    assert got["big"].root_cause.startswith("run budget: needs ~600 s, ") and "s left: not started" in (
        got["big"].root_cause
    )
    assert got["small"].outcome is Outcome.OK


@pytest.mark.slow
def test_a_cell_waits_for_its_prerequisite_and_the_others_run_beside(cfg):
    pre = Prerequisites({"needs-module": "warm/module"})
    cfg = dataclasses.replace(cfg, prerequisites=pre)
    order: list[str] = []
    specs = [_spec("needs-module", M + "ok"), _spec("free", M + "ok")]
    box: dict[str, object] = {}

    def run() -> None:
        box["rep"] = run_cells(specs, cfg, on_result=lambda r: order.append(r.id))

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 30
    while "free" not in order and time.monotonic() < deadline:
        time.sleep(0.05)
    assert order == ["free"] and pre.state("needs-module") == ("wait", "warm/module")
    pre.settle("warm/module")
    t.join(30)
    assert order == ["free", "needs-module"]


def test_a_prerequisite_stopped_unfinished_leaves_its_cells_not_run(cfg):
    pre = Prerequisites({"needs-module": "warm/module"})
    pre.settle("warm/module", "its JIT module warm/module did not finish: compile budget exceeded after 9 s")
    rep = run_cells([_spec("needs-module", M + "ok")], dataclasses.replace(cfg, prerequisites=pre))
    r = rep.results[0]
    assert r.outcome is Outcome.NOT_RUN and r.root_cause.startswith("its JIT module warm/module did not")


@pytest.mark.slow
def test_a_warm_worker_prefers_its_environment_only_within_a_tier(cfg):
    one, two = {"PROBE_TEST_ENV": "1"}, {"PROBE_TEST_ENV": "2"}
    specs = [_spec("t0-env1", M + "ok", env=one), _spec("t0-env2", M + "ok", env=two),
             _spec("t1-env1", M + "ok", env=one)]  # fmt: skip
    order: list[str] = []
    run_cells(specs, cfg, on_result=lambda r: order.append(r.id))
    assert order == ["t0-env1", "t1-env1", "t0-env2"]  # no tiers: the worker's environment first
    order.clear()
    tiers = {"t0-env1": 0, "t0-env2": 0, "t1-env1": 1}
    run_cells(specs, dataclasses.replace(cfg, tiers=tiers), on_result=lambda r: order.append(r.id))
    assert order == ["t0-env1", "t0-env2", "t1-env1"]


@pytest.mark.slow
def test_long_cells_send_heartbeats(cfg):
    beats: list[Heartbeat] = []
    cfg = dataclasses.replace(cfg, heartbeat_s=0.3, on_heartbeat=beats.append)
    run_cells([_spec("slow", M + "sleepy", s=1.5)], cfg)
    assert len(beats) >= 2 and {b.cell_id for b in beats} == {"slow"}
    assert beats[-1].elapsed_s > beats[0].elapsed_s and beats[-1].limit_s == 60
