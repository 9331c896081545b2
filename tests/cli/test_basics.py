"""CLI plumbing: every verb is wired, --help is instant and light, errors never show tracebacks."""

import json
import subprocess
import sys

import pytest

from probe.cli.main import VERBS, build_parser


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "probe", *args], capture_output=True, text=True, timeout=120, **kw
    )


def test_every_verb_is_built():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb")
    assert set(sub.choices) == set(VERBS)


@pytest.mark.parametrize("verb", VERBS)
def test_verb_help(verb):
    r = run(verb, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: probe " + verb in r.stdout


def test_cli_import_is_light():
    code = (
        "import sys; import probe.cli.main as m; m.build_parser(); "
        "heavy = [n for n in ('torch', 'vllm', 'flashinfer', 'triton', 'numpy') if n in sys.modules]; "
        "print(','.join(heavy))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_usage_error_is_one_line_exit_2():
    r = run("scan", "--target", "not-a-gpu", "/nonexistent-probe-path")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "unknown GPU target" in r.stderr


def test_gpus_json():
    r = run("gpus", "--json")
    assert r.returncode == 0
    data = json.loads(r.stdout)
    assert any(g["target"] == "sm_110" and g["integrated"] for g in data["gpus"])


def test_version():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("probe ")
