"""Field reports that reach a GPU from its family sibling (sm_120 -> sm_121, sm_100 -> sm_103), and the
note that says how far an answer's evidence is when nothing was measured on the GPU asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from probe.recommend.distance import nearest_measured
from probe.recommend.recommender import recommend
from probe.recommend.report_match import kin
from probe.recommend.sources import reported_cells


def _report(rid: str, gpus: list[int], backend: str, outcome: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": rid,
        "source": f"https://github.com/vllm-project/vllm/issues/{abs(hash(rid)) % 99999}",
        "date": "2026-10-01",
        "seen_in": "vllm",
        "gpus": gpus,
        "kind": "moe",
        "backend": backend,
        "quant": "nvfp4",
        "outcome": outcome,
        "symptom": f"{backend} {outcome}",
        "root_cause": f"{backend} kernels {outcome} on this family",
        "checked": "synthetic report for the family tests",
        "open_as_of": "2026-11-24",
        **extra,
    }


def _file(tmp_path: Path, *reports: dict[str, Any]) -> str:
    path = tmp_path / "reports.json"
    path.write_text(json.dumps({"schema_version": 3, "reports": list(reports)}))
    return str(path)


def test_family_siblings_come_from_the_gpu_catalog():
    assert kin(120) == [121] and kin(121) == [120]
    assert 103 in kin(100) and 100 in kin(103)
    assert kin(90) == []


def test_a_kernel_failure_reaches_the_sibling_and_a_build_failure_does_not(tmp_path):
    f = _file(
        tmp_path,
        _report("fam-fault", [120], "cutlass", "device_fault"),
        _report("fam-image", [120], "marlin", "no_kernel_image"),
    )
    cells = [c for c in reported_cells(files=[f], gpus=[121]) if "fam-" in c.cell["id"]]
    assert [c.cell["id"] for c in cells] == ["reported/fam-fault/kin/sm_121"]
    assert cells[0].cell["applies"]["kin_of"] == 120 and cells[0].cell["applies"]["family"] == "sm_120f"


def test_the_answer_rules_out_by_family_and_says_so(tmp_path):
    f = _file(tmp_path, _report("fam-trtllm", [100], "flashinfer_trtllm", "wrong_output"))
    here = recommend("122b", gpu="sm_103", report_files=[f])
    assert here.moe_backend != "flashinfer_trtllm"
    ruled = [r for r in here.ruled_out if r["backend"] == "flashinfer_trtllm" and r["source"] == "reported"]
    assert ruled and ruled[0]["reason"].startswith("on sm_100, a family sibling")


def test_a_success_on_the_gpu_itself_outweighs_a_siblings_failure(tmp_path):
    plain = recommend("122b", gpu="sm_103").moe_backend
    f = _file(
        tmp_path,
        _report("fam-bad", [100], str(plain), "wrong_output"),
        _report("fam-good", [103], str(plain), "ok"),
    )
    assert recommend("122b", gpu="sm_103", report_files=[f]).moe_backend == plain


@pytest.mark.parametrize(("sm", "words"), [(121, "another architecture"), (91, "the same major")])
def test_nearest_measured_gpu_says_how_near(sm, words):
    assert words in str(nearest_measured(sm, {90: {"0.26.0"}}))
    assert "family sibling" in str(nearest_measured(121, {120: {"0.33.0"}, 90: {"0.26.0"}}))


def test_an_answer_without_measurements_says_how_far_its_evidence_is():
    rec = recommend("122b", gpu="sm_121")
    note = next(n for n in rec.notes if n.startswith("No measured matrix"))
    assert "nearest measured: sm_90" in note and "field reports:" in note
