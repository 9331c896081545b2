"""The evidence ladder per half, the combined predicted verdict, and field reports that generalise
(against the published matrices/: the H200 measurement, the vLLM 0.33.0 oracle, the ELF scan)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.catalog.gpus import catalog
from probe.catalog.models import load_profiles
from probe.recommend import verdict as v
from probe.recommend.recommender import model_profile, recommend
from probe.recommend.types import EvidenceCell, Request

ROOT = Path(__file__).resolve().parents[2]
MATRICES = [ROOT / "matrices"]
PUBLISHED = (ROOT / "matrices" / "predicted" / "vllm-0.33.0" / "sm_90.json.gz").is_file()
pytestmark = pytest.mark.skipif(not PUBLISHED, reason="the vLLM 0.33.0 predictions are not published")


def _ruled(out: object) -> dict[str, dict[str, object]]:
    return {e["id"]: e for e in out.evidence if e["role"] in ("ruled_out", "failed")}  # type: ignore[attr-defined]


@pytest.mark.parametrize("gpu", ["sm_89", "sm_80"])
def test_gpt_oss_gets_an_attention_backend_with_sinks(gpu):
    out = recommend("120b", gpu=gpu, matrices=MATRICES)
    assert out.attention_backend == "TRITON_ATTN"  # vLLM's check: FLASH_ATTN / FLASHINFER have no sinks here
    refusal = _ruled(out)[f"predicted/vllm/attention/{gpu}/gpt-oss-120b/FLASH_ATTN"]
    assert "attention sinks not supported" in str(refusal["root_cause"])
    assert str(refusal["note"]).startswith("vllm/") and ":" in str(refusal["note"])  # vLLM's file:line
    assert out.halves["attention"]["basis"] == "predicted"


@pytest.mark.parametrize("model", ["35b", "glm-4.5-air"])
def test_fp8_on_sm_120_is_not_cutlass(model):
    out = recommend(model, gpu="sm_120", quant="fp8", matrices=MATRICES)
    assert out.found and out.moe_backend != "cutlass"
    assert "predicted/cutlass[fp8]/sm_120" in _ruled(out)  # the scan's own fp8 variant: none there


def test_measured_moe_half_with_predicted_attention_half():
    # Without the H100 matrix (whose engine runs measure DeepSeek-V3 end to end), the H200's MoE layers
    # answer the MoE half at the nearest shape and vLLM's own check the MLA attention half.
    h200_only = [ROOT / "matrices/measured/nvidia-h200-sm90-vllm-0.26.0.json", ROOT / "matrices/predicted"]
    out = recommend("deepseek-v3", matrices=h200_only)
    assert out.gpu == "sm_90" and out.found and out.basis == "measured+predicted"
    assert out.halves["moe"]["basis"] == "measured_nearest"
    assert out.halves["attention"]["basis"] == "predicted" and "MLA" in str(out.attention_backend)
    assert (
        "measured at E=256/H=3072/I=1024, nearest to this model's E=256/H=7168/I=2048"
        in (out.halves["moe"]["text"])
    )


def test_an_engine_run_of_the_model_answers_both_halves():
    out = recommend("deepseek-v3", matrices=MATRICES)  # the H100 matrix ran DeepSeek-V3's 2-layer engine
    assert out.gpu == "sm_90" and out.basis == "measured" and out.moe_backend == "flashinfer_cutlass"
    assert out.halves["moe"]["text"] == "measured end to end (engine run of this model)"


def test_field_report_generalises_to_another_model():
    out = recommend("122b", gpu="sm_120", matrices=MATRICES)
    assert out.moe_backend != "cutlass"
    garbage = _ruled(out)["reported/sm_120/moe/cutlass/Qwen3.5-397B-A17B/tp4"]
    assert garbage["note"] == "reported on Qwen3.5-397B-A17B, applies by GPU x backend x quant"
    # ... but not to a model in another quant
    bf16 = recommend("qwen3.5-35b", gpu="sm_120", matrices=MATRICES)
    assert "reported/sm_120/moe/cutlass/Qwen3.5-397B-A17B/tp4" not in _ruled(bf16)


def test_no_backend_works_exits_3_with_vllms_refusals(probe_cli):
    # Mixtral's per-tensor FP8 experts on Turing with vLLM 0.33.0: its own checks refuse every MoE backend
    # but Marlin, whose kernels the ELF scan of the 0.33.0 wheel finds no loadable code of for sm_75.
    r = probe_cli(
        "recommend", "--model", "mixtral", "--quant", "fp8", "--gpu", "sm_75", "--vllm", "0.33.0", "--json"
    )
    assert r.returncode == 3, r.stdout
    out = json.loads(r.stdout)
    assert any("no working moe backend" in w for w in out["warnings"])
    ruled = {x["backend"]: x for x in out["ruled_out"] if x["role"] == "moe"}
    assert "quantization scheme" in ruled["triton"]["reason"] and ruled["triton"]["source"] == "vllm_check"
    assert ruled["triton"]["link"].startswith("vllm/model_executor/layers/fused_moe/experts/triton_moe.py:")
    assert ruled["marlin"]["source"] == "elf_scan" and ruled["marlin"]["outcome"] == "no_kernel_image"
    assert all(x["vllm"] == "0.33.0" for x in out["ruled_out"])  # one vLLM version per answer


@pytest.mark.slow
def test_every_profile_on_every_gpu_gets_an_answer_or_evidence():
    for gpu in catalog().gpus:
        for prof in load_profiles():
            out = recommend(prof.name, gpu=f"sm_{gpu.sm}", matrices=MATRICES)
            if out.found:
                assert out.halves and all(h["basis"] and h["text"] for h in out.halves.values())
            else:
                assert out.evidence and out.warnings, (gpu.sm, prof.name)


@pytest.mark.slow
def test_every_profile_gets_a_pair_on_the_measured_h200():
    for prof in load_profiles():
        out = recommend(prof.name, matrices=MATRICES)
        assert out.gpu == "sm_90" and out.found, (prof.name, out.warnings)
        assert out.attention_backend and (out.moe_backend or not prof.moe), prof.name


# ------------------------------------------------------------------ the steps, one by one


def _req(model: str, sm: int, quant: str | None = None) -> Request:
    prof = model_profile(model, quant)
    return Request.of(prof, prof.quant, None, sm)


def _cell(**kw: object) -> EvidenceCell:
    base = {"id": "x", "evidence": "predicted", "outcome": "ok"}
    return EvidenceCell({**base, **kw}, "f.json", "0.33.0")


def test_oracle_step_quotes_vllm():
    refusal = _cell(basis="vllm_check", kind="moe", backend="marlin", outcome="unsupported",
                    root_cause="no RELU2", details={"file": "vllm/a.py", "line": 7})  # fmt: skip
    step = v.oracle_step([refusal], "marlin", None)
    assert step.ok is False and "no RELU2 (vllm/a.py:7)" in step.reason
    assert v.oracle_step([refusal], "triton", None).ok is None


def test_scan_step_takes_the_quant_variant():
    prim = _cell(kind="moe", backend="cutlass", details={"variant": "nvfp4", "verdict": "sass"})
    fp8 = _cell(kind="moe", backend="cutlass", outcome="no_kernel_image",
                details={"variant": "fp8", "verdict": "none"})  # fmt: skip
    for c in (prim, fp8):
        c.cell["gpu_sm"] = 120
    assert v.scan_step(v.scan_cell([prim, fp8], _req("35b", 120, "fp8"), "moe", "cutlass", None)).ok is False
    assert v.scan_step(v.scan_cell([prim, fp8], _req("35b", 120, "nvfp4"), "moe", "cutlass", None)).ok is True
    assert v.scan_cell([prim, fp8], _req("35b", 120, "bf16"), "moe", "cutlass", None) is None


def test_hand_rule_step_says_so():
    from probe.catalog.backends import catalog

    step = v.hand_rule_step(_req("122b", 110), "moe", "cutlass", catalog())
    assert step.source == "hand_rule" and step.reason.startswith("hand rule")


def test_hand_rules_answer_without_oracle(tmp_path):
    out = recommend("35b", gpu="sm_120", matrices=[ROOT / "matrices" / "static"])
    assert out.found and out.halves["moe"]["text"].startswith("hand rule")


def test_predictions_split_per_gpu_and_read_only_for_the_asked_gpu(tmp_path):
    from probe.oracle.to_matrix import split_by_gpu
    from probe.recommend.sources import load_evidence

    doc = {"schema_version": 1, "kind": "matrix", "provenance": {"label": "x"}, "cells": [
        {"id": "a", "kind": "moe", "evidence": "predicted", "gpu_sm": 89, "outcome": "ok"},
        {"id": "b", "kind": "moe", "evidence": "predicted", "gpu_sm": 120, "outcome": "ok"},
    ]}  # fmt: skip
    parts = split_by_gpu(doc)
    assert set(parts) == {"sm_89.json", "sm_120.json"}
    for name, text in parts.items():
        (tmp_path / name).write_text(text)
    assert json.loads(parts["sm_120.json"])["provenance"]["label"] == "x, sm_120"
    got = load_evidence([tmp_path], 120, reports=False)
    assert [c.cell["id"] for c in got.cells] == ["b"] and got.files == [str(tmp_path / "sm_120.json")]


def _engine(tp: int | None, moe: str, count: int) -> EvidenceCell:
    cell = {"id": f"engine/{moe}/{tp}", "kind": "engine", "evidence": "measured", "gpu_sm": 90,
            "model": "Qwen3.6-35B-A3B", "quant": "nvfp4", "moe_backend": moe,
            "attention_backend": "TRITON_ATTN", "tp": tp, "outcome": "ok"}  # fmt: skip
    return EvidenceCell(cell, "m.json", "0.26.0", "NVIDIA H200", count)


def test_tp2_prefers_tp2_engine_runs_and_says_when_emulated():
    from probe.recommend.types import LoadedEvidence

    both = LoadedEvidence([_engine(None, "marlin", 1), _engine(2, "cutlass", 2)], [])
    out = recommend("35b", gpu="sm_90", tp=2, loaded=both)
    assert out.moe_backend == "cutlass" and not any("emulated" in w for w in out.warnings)
    single = LoadedEvidence([_engine(None, "marlin", 1)], [])
    out = recommend("35b", gpu="sm_90", tp=2, loaded=single)
    assert out.moe_backend == "marlin"
    assert any("emulated" in w for w in out.warnings)
    assert any("fewer than the 2 GPUs" in w for w in out.warnings)
