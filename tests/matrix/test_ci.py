"""ci/ templates parse; ci/selftest.sh passes; matrices/README.md is up to date."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from probe.matrix.index import build_index

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((ROOT / "ci").rglob("*.y*ml")), ids=lambda p: p.name)
def test_yaml_templates_parse(path):
    docs = list(yaml.safe_load_all(path.read_text()))
    assert docs and all(isinstance(d, dict) for d in docs)
    if "github" in path.parts:
        d = docs[0]
        assert d.get("jobs")
        text = path.read_text()
        assert "probe " in text
    else:
        assert docs[0]["kind"] == "Job" and docs[0]["spec"]["template"]["spec"]["containers"]


def test_gate_workflow_runs_probe_and_uploads():
    text = (ROOT / "ci" / "github" / "probe-gate.yml").read_text()
    for needle in (
        "self-hosted",
        "probe run",
        "probe gate",
        "upload-artifact",
        "GITHUB_STEP_SUMMARY",
        "--junit",
        "--budget",  # a fresh runner: a time budget, the last published matrix reused, JIT caches kept
        "--reuse /out/baseline.json",
        "actions/cache",
        "FLASHINFER_WORKSPACE_BASE=/jit",
        "TRITON_CACHE_DIR=/jit",
        "CUDA_CACHE_PATH=/jit",
        "TORCH_EXTENSIONS_DIR=/jit",
    ):
        assert needle in text
    fleet = yaml.safe_load((ROOT / "ci" / "github" / "probe-fleet.yml").read_text())
    assert fleet["jobs"]["probe"]["strategy"]["matrix"]["gpu"] and "probe merge" in str(
        fleet["jobs"]["merge"]
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_selftest_script():
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("GITHUB_ACTIONS", None)
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.pop("PROBE_MATRICES", None)
    r = subprocess.run(
        ["bash", str(ROOT / "ci" / "selftest.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout


def test_matrices_index_is_current():
    committed = (ROOT / "matrices" / "README.md").read_text(encoding="utf-8")
    assert committed == build_index(ROOT / "matrices"), (
        "matrices/README.md is stale: run `probe show --index matrices/ -o matrices/README.md`"
    )
