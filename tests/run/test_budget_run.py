"""A whole run under a time budget (``run_plan``), the JIT pre-pass beside the cells, and a resume that
measures what the budget left out (real sandboxed fixture cells)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid

import pytest

from probe.cells import CellResult, CellSpec
from probe.outcomes import Outcome
from probe.run import RunOptions, run_plan
from probe.run.prepass import PrePass
from probe.sandbox.config import RunnerConfig
from probe.sandbox.prereq import Prerequisites
from probe.sandbox.runner import run_cells
from tests.run.conftest import cell
from tests.sandbox.conftest import M

pytestmark = pytest.mark.slow  # each waits out a real budget or build

J = "tests.sandbox.children.jit_child:"


def _fixture(cid: str, target: str, timeout_s: float = 60, **params: object) -> CellSpec:
    return CellSpec.model_validate({"id": cid, "kind": "fixture", "target": target, "params": params,
                                    "timeout_s": timeout_s, "isolate": True})  # fmt: skip


def test_the_run_ends_within_its_budget_and_a_resume_measures_the_rest(tmp_path, site, fake_gpu):
    cells = (cell("a", "moe", backend="marlin"), cell("b", "moe", "sleepy", backend="marlin", s=60),
             cell("c", "moe", backend="triton"))  # fmt: skip
    t0 = time.monotonic()
    opts = RunOptions(cells=cells, journal=tmp_path / "j.jsonl", output=tmp_path / "m.json", budget_s=12.0,
                      grace_s=1.0, site_dirs=(str(site),))  # fmt: skip
    report = run_plan(opts)
    took = time.monotonic() - t0
    assert took < 12.0, took
    got = {r.id: r for r in report.results}
    assert set(got) == {"a", "b", "c"} and not report.not_run  # every planned cell has a row
    assert got["a"].outcome is Outcome.OK
    assert got["b"].outcome is Outcome.NOT_RUN and got["b"].root_cause.startswith("run budget spent: stopped")
    assert got["c"].outcome is Outcome.NOT_RUN and got["c"].root_cause == "run budget spent: not started"
    assert json.loads((tmp_path / "m.json").read_text())["run"]["status"] == "partial"

    quick = (cells[0], cell("b", "moe", "sleepy", backend="marlin", s=60), cells[2])
    again = run_plan(dataclasses.replace(opts, cells=quick, budget_s=None, resume=True, timeout_s=5.0))
    assert {r.id for r in again.ran} == {"b", "c"}  # not_run rows are not done: measured now
    assert {r.id: r.outcome.value for r in again.results}["c"] == "ok"


def test_cells_run_beside_the_pre_pass_and_wait_only_for_their_module(tmp_path):
    cfg = RunnerConfig(run_id=f"t{uuid.uuid4().hex[:10]}", grace_s=1.0, jobs=1)
    warm = _fixture("warm/module", J + "builds", units=8, step_s=0.4, build_dir=str(tmp_path / "b"))
    pre = PrePass([warm], Prerequisites({"needs": "warm/module"}))
    order: list[tuple[str, float]] = []
    lock = threading.Lock()

    def seen(r: CellResult) -> None:
        with lock:
            order.append((r.id, time.monotonic()))

    stop = threading.Event()
    pre.start(cfg, tmp_path / "j.warm.jsonl", stop, seen)
    main = [_fixture("needs", M + "ok"), _fixture("free1", M + "ok"), _fixture("free2", M + "ok")]
    run_cells(main, dataclasses.replace(cfg, prerequisites=pre.prerequisites), on_result=seen)
    pre.join(60)
    ids = [i for i, _ in order]
    assert ids.index("free1") < ids.index("warm/module") < ids.index("needs")
    assert ids.index("free2") < ids.index("warm/module")
    assert pre.results[0].outcome is Outcome.OK


def test_a_module_stopped_unfinished_leaves_its_cells_not_run(tmp_path):
    cfg = RunnerConfig(run_id=f"t{uuid.uuid4().hex[:10]}", grace_s=1.0, jit_timeout_s=2.0)
    warm = _fixture("warm/module", J + "builds", timeout_s=1.5, units=40, step_s=0.4, build_dir=str(tmp_path))
    pre = PrePass([warm], Prerequisites({"needs": "warm/module"}))
    pre.start(cfg, tmp_path / "j.warm.jsonl", threading.Event())
    rep = run_cells([_fixture("needs", M + "ok")], dataclasses.replace(cfg, prerequisites=pre.prerequisites))
    pre.join(60)
    w = pre.results[0]
    assert w.outcome is Outcome.NOT_RUN and w.root_cause.startswith("compile budget exceeded after ")
    assert " of 41 units built" in w.root_cause
    needs = rep.results[0]
    assert needs.outcome is Outcome.NOT_RUN
    assert needs.root_cause.startswith("its JIT module warm/module did not finish building: compile budget")
