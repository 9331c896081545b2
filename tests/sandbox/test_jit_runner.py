"""The runner's JIT budget: a cell that compiles past its own limit is not a hang."""

from __future__ import annotations

import dataclasses

import pytest

from probe.cells import CellSpec
from probe.outcomes import Outcome
from probe.sandbox.runner import run_cells

J = "tests.sandbox.children.jit_child:"

# every cell here waits out a real (short) time-out or compile: 1-4 s each
pytestmark = pytest.mark.slow


def _one(cfg, target: str, timeout_s: float, jit_timeout_s: float, **params):
    cfg = dataclasses.replace(cfg, jit_timeout_s=jit_timeout_s)
    spec = CellSpec(
        id=target, kind="fixture", target=J + target, params=params, timeout_s=timeout_s, isolate=True
    )
    rep = run_cells([spec], cfg)
    assert len(rep.results) == 1
    return rep.results[0]


def test_compiling_past_the_cell_limit_gets_the_jit_budget(cfg):
    r = _one(cfg, "compiles", timeout_s=1.0, jit_timeout_s=60.0, compile_s=4)
    assert r.outcome is Outcome.OK, r.root_cause
    assert r.details["compile_s"] >= 2.5 and "ninja" in r.details["jit_tools"]


def test_a_build_longer_than_the_jit_budget_is_not_run_not_a_hang(cfg):
    """A compile that did not finish says nothing about the backend: ``not_run`` with the compile's
    progress, never ``timeout``."""
    r = _one(cfg, "compiles", timeout_s=1.0, jit_timeout_s=2.0, compile_s=60)
    assert r.outcome is Outcome.NOT_RUN and not r.outcome.failed
    assert r.phase == "jit"
    assert r.root_cause is not None and r.root_cause.startswith("compile budget exceeded after ")
    assert "the JIT time limit of 2 s was spent" in r.root_cause
    assert r.wall_s < 30


def test_a_stopped_build_says_how_many_units_it_built(cfg, tmp_path):
    # the units are counted from the build file beside the compiler's -o output (not named by the child)
    r = _one(cfg, "builds", timeout_s=1.5, jit_timeout_s=3.0, units=40, step_s=0.8, build_dir=str(tmp_path),
             name_build_file=False)  # fmt: skip
    assert r.outcome is Outcome.NOT_RUN, r.root_cause
    built = len(list(tmp_path.glob("*.o")))
    assert 1 <= built < 40
    assert f", {built} of 41 units built (JIT-compiling " in r.root_cause and ".cu" in r.root_cause
    assert r.details["jit_units"] == {"done": built, "total": 41, "from": "build.ninja"}


def test_a_hang_without_a_compiler_keeps_the_plain_limit(cfg):
    r = _one(cfg, "hangs", timeout_s=1.0, jit_timeout_s=60.0, sleep_s=60)
    assert r.outcome is Outcome.TIMEOUT and r.wall_s < 20
    assert "JIT" not in (r.root_cause or "") and "compile_s" not in r.details


def test_jit_budget_off(cfg):
    """No extra time for compiling: stopped at the cell's own limit, still while compiling (unknown)."""
    r = _one(cfg, "compiles", timeout_s=3.0, jit_timeout_s=0.0, compile_s=60)  # 3 s: the child is up
    assert r.outcome is Outcome.NOT_RUN and r.wall_s < 20
    assert r.root_cause.startswith("compile budget exceeded after ")


def test_an_in_process_jit_declared_by_the_probe_gets_the_jit_budget(cfg):
    r = _one(cfg, "driver_jit", timeout_s=1.0, jit_timeout_s=60.0, jit_s=4)
    assert r.outcome is Outcome.OK, r.root_cause
    assert r.details["compile_s"] >= 2.5 and r.details["jit_tools"] == ["driver"]
    assert r.details["jit_targets"] == ["driver JIT of compute_80 PTX (fixture)"]


def test_a_declared_jit_past_its_budget_names_what_it_compiled(cfg):
    r = _one(cfg, "driver_jit", timeout_s=1.0, jit_timeout_s=2.0, jit_s=60)
    assert r.outcome is Outcome.NOT_RUN and r.phase == "jit"
    assert "driver JIT of compute_80 PTX (fixture)" in r.root_cause
