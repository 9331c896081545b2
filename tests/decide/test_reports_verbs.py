"""probe reports / probe report add / --reports files in recommend and gate, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests/data/logs/tuning/069_flashinfer_cutlass_moe_fp4_spark_illegal_instruction.log"


def test_the_spark_list_reads_as_a_user_would_write_it(probe_cli):
    r = probe_cli("reports", "--gpu", "sm_121")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("sm_121 (GB10, DGX Spark): ")
    assert "open failures, any model: " in out and "seen working: " in out
    assert "\n  marlin (MoE)\n" in out and "\n  flashinfer_cutlass (MoE)\n" in out
    assert "https://github.com/vllm-project/vllm/issues/" in out and "cause: " in out and "fix: " in out
    assert "sm_120" not in out.split("\n")[0]


def test_a_version_keeps_only_reports_whose_range_holds_it(probe_cli):
    r = probe_cli("reports", "--gpu", "sm_90", "--vllm", "0.33.0", "--json")
    assert r.returncode == 0, r.stderr
    items = json.loads(r.stdout)
    assert items and all(x["status"]["state"] in ("in_range", "newer_than_seen", "unknown") for x in items)
    every = json.loads(probe_cli("reports", "--gpu", "sm_90", "--json").stdout)
    assert len(every) > len(items)  # fixed ones (and fixes whose release is not recorded) drop out


def test_coverage_table_in_markdown(probe_cli):
    r = probe_cli("reports", "--coverage", "--format", "md")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("| GPU | Marlin MoE | CUTLASS MoE | FlashInfer MoE |")
    assert any(line.startswith("| sm_121 (GB10, DGX Spark) |") for line in lines)
    assert lines[-3].startswith("| **all** |") and lines[-1].endswith("counts on each of their rows.")


def test_report_add_appends_a_checked_entry_to_the_users_file(probe_cli, tmp_path):
    out = tmp_path / "site.json"
    args = [
        "report",
        "add",
        str(LOG),
        "--gpu",
        "spark",
        "--vllm",
        "0.33.0",
        "--backend",
        "flashinfer_cutlass",
    ]
    r = probe_cli(*args, "--model", "nvidia/Qwen3-30B-A3B-NVFP4", "--quant", "nvfp4",
                  "--url", "https://github.com/example/project/issues/7", "-o", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    (e,) = doc["reports"]
    assert (e["gpus"], e["kind"], e["outcome"], e["versions"]) == (
        [121],
        "moe",
        "device_fault",
        {"vllm": ["0.33.0"]},
    )
    assert e["log_line"] == "CUDA error: an illegal instruction was encountered" and "rule" in e["checked"]
    again = probe_cli(*args, "--citation", "CI run 7", "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert len(json.loads(out.read_text())["reports"]) == 2
    listed = probe_cli("reports", "--gpu", "sm_121", "--backend", "flashinfer_cutlass", "--reports", str(out))
    assert "https://github.com/example/project/issues/7" in listed.stdout


@pytest.mark.parametrize(
    ("extra", "code", "words"),
    [
        ([], 2, "--url"),
        (["--url", "https://x.org/1", "--gpu", "sm_999x"], 2, "sm_999x"),
        (["--url", "https://x.org/1", "-o", str(ROOT / "probe/data/reports.json")], 2, "packaged"),
    ],
)
def test_report_add_refuses(probe_cli, extra, code, words):
    args = ["report", "add", str(LOG), "--gpu", "sm_121", "--backend", "marlin", *extra]
    r = probe_cli(*args)
    assert r.returncode == code and words in r.stderr and "Traceback" not in r.stderr


def test_report_add_of_a_missing_log_is_bad_input(probe_cli, tmp_path):
    r = probe_cli("report", "add", str(tmp_path / "nope.log"), "--gpu", "sm_121", "--backend", "marlin",
                  "--url", "https://x.org/1", "-o", str(tmp_path / "r.json"))  # fmt: skip
    assert r.returncode == 6 and "no such log file" in r.stderr


def _user_report(tmp_path: Path, **kw: object) -> Path:
    entry = {
        "id": "site-thor-garbage",
        "source": "https://github.com/example/project/issues/9",
        "date": "2026-11-20",
        "seen_in": "vllm",
        "gpus": [110],
        "kind": "moe",
        "backend": "cutlass",
        "quant": "nvfp4",
        "versions": {"vllm": ["0.26.0"]},
        "open_as_of": "2026-11-24",
        "outcome": "wrong_output",
        "symptom": "garbage tokens from the first request",
        "root_cause": "not established",
        "works_with": ["marlin"],
        "checked": "reproduced on our Thor",
        **kw,
    }
    path = tmp_path / "site.json"
    path.write_text(json.dumps({"schema_version": 3, "reports": [entry]}))
    return path


def test_recommend_takes_a_users_report_file(probe_cli, tmp_path):
    base = ["recommend", "--model", "nano", "--gpu", "sm_110a", "--json"]  # the published predictions
    before = json.loads(probe_cli(*base).stdout)
    assert before["moe_backend"] == "marlin"
    site = _user_report(tmp_path, backend="marlin", works_with=["cutlass"])
    after = json.loads(probe_cli(*base, "--reports", str(site)).stdout)
    assert after["moe_backend"] not in (None, "marlin")
    ruled = {e["id"]: e for e in after["evidence"] if e["role"] in ("ruled_out", "failed")}
    cited = ruled["reported/site-thor-garbage"]
    assert (
        cited["outcome"] == "wrong_output"
        and "https://github.com/example/project/issues/9" in cited["citation"]
    )
    # the answer is for vLLM 0.33.0 (the newest published predictions): the report, seen on 0.26.0 and
    # still open, applies and says it was not re-checked there
    assert "seen up to vLLM 0.26.0, open as of 2026-11-24; not re-checked on vLLM 0.33.0" in cited["citation"]
    env = json.loads(probe_cli(*base, env={"PROBE_REPORTS": str(site)}).stdout)
    assert env["moe_backend"] == after["moe_backend"]


def test_a_bad_report_file_is_bad_input(probe_cli, tmp_path):
    bad = _user_report(tmp_path, date="yesterday")
    r = probe_cli("reports", "--reports", str(bad))
    assert r.returncode == 6 and "date 'yesterday'" in r.stderr


def test_from_run_exports_a_runs_failures(probe_cli, data_dir, tmp_path):
    out = tmp_path / "fleet.json"
    r = probe_cli("reports", "--from-run", str(data_dir / "current-regression.json"), "-o", str(out),
                  "--url", "https://ci.example.org/runs/42")  # fmt: skip
    assert r.returncode == 0, r.stderr
    reports = json.loads(out.read_text())["reports"]
    assert reports and all(
        e["source"] == "https://ci.example.org/runs/42" and e["gpus"] == [110] for e in reports
    )
    assert all(e["outcome"] != "unsupported" for e in reports)
    assert probe_cli("reports", "--reports", str(out), "--gpu", "sm_110").returncode == 0


def test_gate_warns_on_an_open_report_in_the_images_range(probe_cli, data_dir, tmp_path):
    junit = tmp_path / "gate.xml"
    site = _user_report(tmp_path, outcome="device_fault", symptom="illegal memory access after 5 requests")
    r = probe_cli("gate", "--baseline", str(data_dir / "baseline.json"),
                  "--current", str(data_dir / "current-unchanged.json"), "--reports", str(site),
                  "--junit", str(junit))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    warn = [line for line in r.stdout.splitlines() if line.startswith("  [warn] reports:")]
    assert any("illegal memory access" in w and "issues/9" in w for w in warn)
    assert "warning: " in junit.read_text()


def test_a_reports_workaround_joins_the_answer_for_its_backend(probe_cli, tmp_path):
    """A field report of a failure of a backend measured working here: the measurement keeps the
    backend, the answer shows both (the report's warning) and carries its workaround (environment,
    flags — never another backend, which is the ranking's business) with the link."""
    base = ["recommend", "--model", "35b", "--gpu", "sm_90", "--json"]  # auto: marlin here, measured
    first = json.loads(probe_cli(*base).stdout)
    assert (first["moe_backend"], first["moe_backend_resolved"]) == ("auto", "marlin")
    site = _user_report(
        tmp_path,
        gpus=[90],
        backend="marlin",
        outcome="crashed",
        symptom="engine died after hours of serving",
        workaround={"env": {"VLLM_MARLIN_USE_ATOMIC_ADD": "1"}, "flags": ["--enforce-eager"]},
    )
    out = json.loads(probe_cli(*base, "--reports", str(site)).stdout)
    assert out["moe_backend_resolved"] == "marlin"
    assert out["env"].get("VLLM_MARLIN_USE_ATOMIC_ADD") == "1" and "--enforce-eager" in out["flags"]
    assert any("https://github.com/example/project/issues/9" in n for n in out["needs"])
    assert any("marlin" in w and "field report" in w for w in out["warnings"])  # shown, not silent
    switch = _user_report(tmp_path, gpus=[90], backend="marlin", outcome="crashed", symptom="died",
                          workaround={"flags": ["--moe-backend", "triton"]})  # fmt: skip
    out = json.loads(probe_cli(*base, "--reports", str(switch)).stdout)
    assert out["flags"].count("--moe-backend") == 1 and out["moe_backend_resolved"] == "marlin"
