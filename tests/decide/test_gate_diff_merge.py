"""probe gate / diff / merge on the committed fixture matrices (real processes)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest


def test_gate_passes_unchanged(data_dir, tmp_path, probe_cli):
    junit = tmp_path / "gate.xml"
    r = probe_cli(
        "gate",
        "--baseline",
        str(data_dir / "baseline.json"),
        "--current",
        str(data_dir / "current-unchanged.json"),
        "--models",
        "122b,35b",
        "--require-arch",
        "sm_110a:*_moe_C*",
        "--junit",
        str(junit),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    root = ET.fromstring(junit.read_text())
    assert root.find(".//failure") is None and len(root.findall(".//testcase")) >= 3


def test_gate_blocks_regression(data_dir, tmp_path, probe_cli):
    summary = tmp_path / "summary.md"
    r = probe_cli(
        "gate",
        "--baseline",
        str(data_dir / "baseline.json"),
        "--current",
        str(data_dir / "current-regression.json"),
        "--models",
        "122b,35b",
        "--require-arch",
        "sm_110a:_moe_C",
        "--json",
        env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert r.returncode == 1, r.stderr
    annotations = [line for line in r.stdout.splitlines() if line.startswith("::error title=")]
    report = json.loads(r.stdout[r.stdout.index("{") :])
    groups = {c["group"] for c in report["regressions"]}
    assert groups == {"cells", "arch", "recommendation"}
    assert len(annotations) == len(report["regressions"])
    msgs = " ".join(c["message"] for c in report["regressions"])
    assert "disappeared" in msgs and "slower" in msgs and "sm_110a" in msgs
    assert "REGRESSION" in summary.read_text()


def test_gate_slowdown_threshold(data_dir, probe_cli):
    r = probe_cli(
        "gate",
        "--baseline",
        str(data_dir / "baseline.json"),
        "--current",
        str(data_dir / "current-unchanged.json"),
        "--models",
        "35b",
        "--slowdown",
        "0.01",
    )
    assert r.returncode == 1 and "slower" in r.stdout  # the unchanged image is 2 % slower on marlin


@pytest.mark.slow
def test_gate_exit_codes(data_dir, tmp_path, probe_cli):
    base = str(data_dir / "baseline.json")
    assert (
        probe_cli(
            "gate", "--baseline", base, "--current", str(data_dir / "current-infra-failed.json")
        ).returncode
        == 4
    )
    assert probe_cli("gate", "--baseline", base, "--current", base, "--slowdown", "-1").returncode == 2
    assert (
        probe_cli("gate", "--baseline", base, "--current", base, "--require-arch", "sm_110a").returncode == 2
    )
    assert probe_cli("gate", "--baseline", base, "--current", base, "--models", "nope-model").returncode == 2
    other = json.loads((data_dir / "baseline.json").read_text())
    for c in other["cells"]:
        c["id"] = "other/" + c["id"]
    other["static"] = None
    (tmp_path / "other.json").write_text(json.dumps(other))
    # deepseek-v3 (MLA, fp8_block): nothing in these matrices nor in the field reports speaks for it on
    # sm_110 (mixtral no longer qualifies: the Thor report of unquantized MoE on Triton covers it)
    r = probe_cli(
        "gate", "--baseline", base, "--current", str(tmp_path / "other.json"), "--models", "deepseek-v3"
    )
    assert r.returncode == 4  # every baseline cell is missing: the prober did not run them
    r = probe_cli(
        "gate",
        "--baseline",
        base,
        "--current",
        str(tmp_path / "other.json"),
        "--models",
        "deepseek-v3",
        "--max-missing",
        "1.0",
    )
    assert r.returncode == 3, r.stdout


def test_gate_refuses_different_gpus(data_dir, tmp_path, probe_cli):
    other = json.loads((data_dir / "current-unchanged.json").read_text())
    other["provenance"]["gpu"].update({"sm": 90, "cc": "9.0", "name": "NVIDIA H100"})
    other["cells"][0]["details"]["gpu"]["cc"] = "9.0"
    other["cells"][0]["gpu_sm"] = 90
    (tmp_path / "h100.json").write_text(json.dumps(other))
    r = probe_cli(
        "gate", "--baseline", str(data_dir / "baseline.json"), "--current", str(tmp_path / "h100.json")
    )
    assert r.returncode == 3 and "sm_90" in r.stdout


@pytest.mark.slow
def test_diff(data_dir, probe_cli):
    r = probe_cli(
        "diff", str(data_dir / "baseline.json"), str(data_dir / "current-regression.json"), "--json"
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert {c["id"] for c in d["cells"] if c["regression"]} >= {"moe/cutlass/nvfp4/E=256/H=3072/I=1024/tp=1"}
    assert {"path": "vllm/_moe_C.abi3.so", "kernel": None, "gained": [], "lost": ["sm_110a"]} in d["arches"]
    assert any(a["kernel"] == "marlin_moe_wna16::Marlin" for a in d["arches"])
    assert d["versions"]["vllm"] == {"old": "0.26.0", "new": "0.27.1"}
    rec = {x["model"]: x for x in d["recommendations"]}
    assert (
        rec["Qwen3.5-122B-A10B"]["new"] is None and rec["Qwen3.5-122B-A10B"]["old"] == "cutlass + TRITON_ATTN"
    )
    same = probe_cli("diff", str(data_dir / "baseline.json"), str(data_dir / "baseline.json"), "--json")
    assert json.loads(same.stdout)["cells"] == []


@pytest.mark.slow
def test_merge_then_show(data_dir, tmp_path, probe_cli):
    fleet = tmp_path / "fleet.json"
    assert (
        probe_cli(
            "merge",
            str(data_dir / "baseline.json"),
            str(data_dir / "current-regression.json"),
            "-o",
            str(fleet),
        ).returncode
        == 0
    )
    doc = json.loads(fleet.read_text())
    assert doc["kind"] == "fleet" and len(doc["columns"]) == 2
    r = probe_cli("show", str(fleet))
    assert r.returncode == 0 and doc["columns"][1] in r.stdout
    assert probe_cli("gate", "--baseline", str(fleet), "--current", str(fleet)).returncode == 2


_UNKNOWN = {
    "not_run": "run budget spent: not started (needs ~40 s, 12 s left)",
    "timeout": "probe: stopped while JIT-compiling fused_moe_90 after 1200 s of compiling",  # older journals
}


@pytest.mark.parametrize("outcome", sorted(_UNKNOWN))
def test_gate_calls_no_unknown_cell_a_regression(data_dir, tmp_path, probe_cli, outcome):
    """Every cell that passed in the baseline is unknown now (the budget ran out, or it was stopped while
    compiling): no regression, no vanished recommendation; the report says what was not measured."""
    m = json.loads((data_dir / "baseline.json").read_text())
    turned = 0
    for c in m["cells"]:
        if c["outcome"] == "ok" and c["kind"] != "import":
            c.update(outcome=outcome, root_cause=_UNKNOWN[outcome], phase="jit", timings={})
            turned += 1
    current = tmp_path / "current.json"
    current.write_text(json.dumps(m))
    r = probe_cli("gate", "--baseline", str(data_dir / "baseline.json"), "--current", str(current),
                  "--models", "122b,35b", "--json")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout[r.stdout.index("{") :])
    assert report["regressions"] == []
    assert f"{turned} cell(s) not measured in the current run" in r.stdout
