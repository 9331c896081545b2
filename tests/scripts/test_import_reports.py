"""scripts/import_reports.py: a research batch in the staging format, normalised and merged."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("import_reports", ROOT / "scripts" / "import_reports.py")
assert spec and spec.loader
importer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(importer)

STAGED = {
    "id": "vllm-1-sm120-gemm-int4",
    "source": "https://github.com/vllm-project/vllm/issues/1",
    "also": ["https://github.com/vllm-project/vllm/pull/2"],
    "date": "2026-03-01",
    "gpus": ["sm_120a"],
    "gpu_names": ["RTX 5090"],
    "kind": "other",
    "backend": "flashinfer_fp8_gemm",
    "fa_version": None,
    "quant": "int4",
    "features": {"tp": 2},
    "models": ["x/Model-AWQ"],
    "versions": {"vllm": ["0.17.0", "main"], "flashinfer": ["0.6.11 (python)"], "container": ["img:1"]},
    "introduced_in": None,
    "fixed_in": None,
    "open_as_of": "2026-11-24",
    "outcome": "device_fault",
    "symptom": "illegal memory access",
    "root_cause": "unknown",
    "workaround": {"flags": [], "env": {}, "note": ""},
    "works_with": ["MARLIN_GEMM"],
    "log_line": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "checked": "read issue; vLLM build as written: main (2026-02)",
}


def _run(tmp_path: Path, *lines: dict[str, object]) -> dict[str, object]:
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(x) + "\n" for x in lines))
    into = tmp_path / "reports.json"
    assert importer.main([str(batch), "--into", str(into)]) == 0
    return json.loads(into.read_text())


def test_a_staged_entry_is_normalised(tmp_path):
    (e,) = _run(tmp_path, STAGED)["reports"]
    assert e["gpus"] == [120] and (e["kind"], e["backend"]) == ("gemm", "flashinfer_fp8_gemm")
    assert e["quant"] == "int4_w4a16" and e["works_with"] == ["marlin_gemm"]
    assert e["versions"] == {"vllm": ["0.17.0"], "flashinfer": ["0.6.11"]}
    for note in ("vllm main", "flashinfer 0.6.11 (python)", "container img:1"):
        assert note in e["versions_text"]
    assert e["seen_in"] == "vllm" and e["model_specific"] is True  # a device fault: the models it was seen on
    assert "workaround" not in e  # an empty one is dropped


def test_a_duplicate_is_dropped_and_its_links_kept(tmp_path):
    again = {**STAGED, "id": "vllm-1-again", "also": ["https://github.com/vllm-project/vllm/issues/3"]}
    doc = _run(tmp_path, STAGED, again)
    (e,) = doc["reports"]
    assert e["also"] == [
        "https://github.com/vllm-project/vllm/pull/2",
        "https://github.com/vllm-project/vllm/issues/3",
    ]


def test_an_entry_that_stays_invalid_stops_the_import(tmp_path):
    batch = tmp_path / "bad.jsonl"
    batch.write_text(json.dumps({**STAGED, "date": "2026-13-01"}) + "\n")
    into = tmp_path / "reports.json"
    assert importer.main([str(batch), "--into", str(into)]) == 6
    assert not into.exists()
