"""The fleet templates users copy (``ci/``) are checked by their ecosystem's own validators: the Kubernetes
Job against the Kubernetes API schema (``kubernetes-validate``, strict: no unknown field), the GitHub
Actions workflows against the workflow schema editors and linters use (SchemaStore's, bundled with
``check-jsonschema``) and by ``zizmor``, the GitHub Actions static analyser (every ``uses:`` pinned to a
commit, no ``${{ }}`` expanded inside a ``run:`` script, least-privilege ``permissions:``, no dangerous
trigger such as ``workflow_run``). zizmor is the workflow linter because it installs from PyPI as a
self-contained binary wheel and runs ``--offline``; actionlint's PyPI package fetches a Go binary from
GitHub at install time, which a machine without GitHub access cannot."""

from __future__ import annotations

import json
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


# --offline: no GitHub API; --no-config: a stray zizmor.yml cannot switch audits off;
# --strict-collection: a workflow zizmor cannot parse fails instead of yielding no findings
ZIZMOR_FLAGS = ("--offline", "--no-config", "--strict-collection", "--format", "json-v1")


def _zizmor(path: Path) -> subprocess.CompletedProcess[str]:
    cmd = [_tool("zizmor"), *ZIZMOR_FLAGS, str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _findings(r: subprocess.CompletedProcess[str]) -> list[dict]:
    try:
        found = json.loads(r.stdout)
    except ValueError:  # zizmor failed before auditing: no JSON, the reason is on stderr
        return []
    return found if isinstance(found, list) else []


def _describe(r: subprocess.CompletedProcess[str]) -> str:
    lines = [f"zizmor exit {r.returncode}"]
    for f in _findings(r):
        for loc in f["locations"]:
            if loc["symbolic"]["kind"] == "Primary":
                row = loc["concrete"]["location"]["start_point"]["row"] + 1
                lines.append(f"{f['ident']} (line {row}): {f['desc']}: {loc['symbolic']['annotation']}")
    return "\n".join(lines) + "\n" + r.stderr


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


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_the_github_workflows_have_no_zizmor_findings(workflow):
    r = _zizmor(workflow)
    assert r.returncode == 0 and _findings(r) == [], _describe(r)


def test_zizmor_flags_an_unpinned_action_and_an_injection(tmp_path):
    """The zizmor check can fail: a tag instead of a commit, an input pasted into a script."""
    fleet = (ROOT / "ci" / "github" / "probe-fleet.yml").read_text()
    wf = tmp_path / "wf.yml"
    wf.write_text(fleet.replace('docker pull "$IMAGE"', 'docker pull "${{ inputs.image }}"', 1))
    r = _zizmor(wf)
    assert r.returncode != 0 and "template-injection" in {f["ident"] for f in _findings(r)}, _describe(r)
    head, sep, rest = fleet.partition("uses: actions/upload-artifact@")
    wf.write_text(head + sep + "v4" + rest[rest.index(" #") :])
    r = _zizmor(wf)
    assert r.returncode != 0 and "unpinned-uses" in {f["ident"] for f in _findings(r)}, _describe(r)
