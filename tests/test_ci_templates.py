"""The fleet templates users copy (``ci/``) are checked by their ecosystem's own validators: the Kubernetes
Job against the Kubernetes API schema (``kubernetes-validate``, strict: no unknown field), the GitHub
Actions workflows against the workflow schema editors and linters use (SchemaStore's, bundled with
``check-jsonschema``). actionlint itself fetches a Go binary at install time, which a machine without
GitHub access cannot: the schema check is what runs here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / "ci" / "github").glob("*.yml"))
JOBS = sorted((ROOT / "ci" / "k8s").glob("*.yaml"))


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return path


def _k8s(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_tool("kubernetes-validate"), "--strict", "--no-warn", str(path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def _workflow(path: Path) -> subprocess.CompletedProcess[str]:
    cmd = [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.name)
def test_the_kubernetes_job_is_valid_against_the_api_schema(job):
    r = _k8s(job)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_the_github_workflows_are_valid(workflow):
    r = _workflow(workflow)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_validators_reject_a_broken_template(tmp_path):
    """The checks can fail: an unknown container field, a misspelled job key."""
    job = tmp_path / "job.yaml"
    job.write_text(
        JOBS[0].read_text().replace("restartPolicy: Never", "restartPolicy: Never\n      bogusField: 1")
    )
    assert _k8s(job).returncode != 0
    wf = tmp_path / "wf.yml"
    wf.write_text(WORKFLOWS[0].read_text().replace("runs-on:", "runs_on:", 1))
    assert _workflow(wf).returncode != 0
