"""Probe-bug attribution: an exception raised in probe's own code is flagged (details.probe_error)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

import probe
from probe.cells import CellSpec
from probe.outcomes import Outcome
from probe.sandbox import procs, results
from probe.sandbox.results import probe_code_location
from probe.sandbox.runner import RunnerConfig, run_cells

FIXTURE_DIR = Path(__file__).resolve().parent / "bugfixture"
T = "tests.probes.bugfixture.buggy:"
PKG = Path(probe.__file__).resolve().parent


@pytest.fixture
def cfg():
    c = RunnerConfig(run_id=f"t{uuid.uuid4().hex[:10]}", grace_s=1.0)
    yield c
    deadline = time.monotonic() + 3
    while procs.token_pids(f"{c.run_id}-", prefix=True) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not procs.token_pids(f"{c.run_id}-", prefix=True)


def one(cfg: RunnerConfig, target: str, isolate: bool = False, params: dict | None = None):
    spec = CellSpec(
        id=target.rsplit(":", 1)[-1],
        kind="fixture",
        target=target,
        params=params or {},
        isolate=isolate,
        timeout_s=60,
    )
    rep = run_cells([spec], cfg)
    assert len(rep.results) == 1 and not rep.not_run
    return rep.results[0]


def test_location_helper_recognises_probe_package():
    err = {
        "type": "AttributeError",
        "message": "x",
        "frame": {"file": str(PKG / "probes" / "moe.py"), "line": 42},
    }
    assert probe_code_location(err) == "probe/probes/moe.py:42"
    err["frame"]["file"] = str(PKG / "sandbox" / "worker.py")
    assert probe_code_location(err) == "probe/sandbox/worker.py:42"
    for outside in (
        "/usr/lib/python3/site-packages/vllm/model_executor/layers/fused_moe/layer.py",
        str(PKG / "catalog" / "models.py"),
    ):
        err["frame"]["file"] = outside
        assert probe_code_location(err) is None
    err["frame"]["file"] = str(PKG / "probes" / "moe.py")
    assert probe_code_location({**err, "import_error": True}) is None
    assert probe_code_location({"type": "X", "message": "no frame"}) is None
    assert probe_code_location(err, dirs=[FIXTURE_DIR]) is None


@pytest.mark.parametrize("isolate", [False, True])
def test_real_probe_code_error_is_flagged(cfg, isolate):
    # probe.probes.moe:run parses its params first: an empty params dict is refused by the cell contract
    r = one(cfg, "probe.probes.moe:run", isolate=isolate)
    assert r.details["exception"]["type"].endswith("CellParamsError")
    assert "missing 4 required keyword-only arguments" in r.details["exception"]["message"]
    assert r.details.get("probe_error") is True
    assert "raised in probe's own code (probe/cell_params.py:" in r.hint
    assert "most likely a probe bug, not a backend failure" in r.hint


@pytest.mark.parametrize("isolate", [False, True])
def test_fixture_attribute_error_flagged_only_inside_probe_code(cfg, monkeypatch, isolate):
    plain = one(cfg, T + "attribute_error", isolate=isolate)
    assert plain.details["exception"]["type"] == "AttributeError"
    assert "probe_error" not in plain.details  # tests/ is not probe's code
    monkeypatch.setattr(results, "PROBE_CODE_DIRS", [*results.PROBE_CODE_DIRS, FIXTURE_DIR])
    r = one(cfg, T + "attribute_error", isolate=isolate)
    assert r.details.get("probe_error") is True
    assert r.hint.startswith("raised in probe's own code (tests/probes/bugfixture/buggy.py:16)")
    assert r.outcome == plain.outcome and r.root_cause == plain.root_cause  # outcome untouched
    assert r.outcome is not Outcome.OK


def test_errors_raised_outside_or_imports_are_not_flagged(cfg, monkeypatch):
    monkeypatch.setattr(results, "PROBE_CODE_DIRS", [*results.PROBE_CODE_DIRS, FIXTURE_DIR])
    elsewhere = one(cfg, T + "raised_elsewhere")
    assert elsewhere.details["exception"]["frame"]["file"].endswith(("json/decoder.py", "json/__init__.py"))
    assert "probe_error" not in elsewhere.details
    missing = one(cfg, T + "missing_module")
    assert missing.details["exception"].get("import_error") is True
    assert "probe_error" not in missing.details
    assert missing.outcome is Outcome.IMPORT_ERROR


@pytest.mark.parametrize("isolate", [False, True])
def test_a_handed_on_stack_failure_is_classified_not_blamed_on_probe(cfg, monkeypatch, isolate):
    monkeypatch.setattr(results, "PROBE_CODE_DIRS", [*results.PROBE_CODE_DIRS, FIXTURE_DIR])
    r = one(cfg, T + "stack_failure", isolate=isolate)
    assert r.details["exception"].get("stack_failure") is True
    assert "probe_error" not in r.details and "probe's own code" not in (r.hint or "")
    assert r.details["ranks"] == [{"rank": 1}]  # the probe's details of the failure are kept
    assert r.outcome is Outcome.DEVICE_FAULT  # read from the log like any other failure
