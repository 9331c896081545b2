"""Answers bound to an image: another image's missing package never rules a backend out, another build's
success needs the same kernels here, and the answer says what it is (auto resolved, the set-up's flags,
one vLLM version's wording), in few lines."""

from __future__ import annotations

import json
from pathlib import Path

from probe.recommend.images import Image
from probe.recommend.recommender import recommend

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "matrices" / "measured"
H200_IMAGE = Image("h200 devkit", {"vllm": "0.26.0", "torch": "2.11.0", "triton": "3.6.0"})


def _ruled(rec, backend):
    return [x for x in rec.ruled_out if x["backend"] == backend]


def test_another_images_missing_package_does_not_rule_a_backend_out(monkeypatch):
    rec = recommend("122b", matrices=[MEASURED])
    flashinfer = _ruled(rec, "FLASHINFER")
    assert not any("ImportError" in x["reason"] or "No module named" in x["reason"] for x in flashinfer)
    assert not any("No module named 'flashinfer'" in x["reason"] for x in rec.ruled_out)


def test_the_same_failure_in_the_image_asked_about_counts(monkeypatch):
    from probe.recommend import recommender

    monkeypatch.setattr(recommender, "_image", lambda src: (None, H200_IMAGE))  # the H200 image itself
    rec = recommend("122b", matrices=[MEASURED])
    assert any("ImportError" in x["reason"] for x in _ruled(rec, "FLASHINFER"))


def test_a_source_builds_report_does_not_beat_the_images_missing_kernels():
    """Thor: a report of a source build with sm_110a code ran cutlass NVFP4 MoE; the stock vLLM 0.33.0
    wheel's scan has no sm_110 kernel for it, so the answer for that image is not cutlass."""
    rec = recommend("122b", gpu="sm_110a")
    assert rec.moe_backend != "cutlass"
    cutlass = _ruled(rec, "cutlass")
    assert cutlass and "no sm_110 kernel in this image" in cutlass[0]["reason"]


def test_auto_is_resolved_and_the_set_up_is_in_the_flags():
    rec = recommend("122b", matrices=[MEASURED])
    assert rec.moe_backend == "auto" and rec.moe_backend_resolved == "marlin"  # the engine's own log
    assert rec.attention_backend_resolved == "FLASH_ATTN (FA3)"
    from probe.recommend.types import Deployment

    served = recommend(
        "120b", gpu="sm_100", tp=2, deploy=Deployment(kv_cache_dtype="fp8", ep=True, speculative="eagle3")
    )
    flags = " ".join(served.flags)
    for flag in ("--tensor-parallel-size 2", "--enable-expert-parallel", "--kv-cache-dtype fp8"):
        assert flag in flags
    assert '--speculative-config {"method": "eagle3"}' in flags


def test_a_report_needing_mla_warns_no_non_mla_model():
    rec = recommend("122b", matrices=[MEASURED])
    assert not any("MLA prefill" in w for w in rec.warnings)


def test_one_version_wording():
    later = recommend("122b", vllm="0.40.0")
    text = " ".join(h["text"] for h in later.halves.values())
    assert "0.40.0's own pick" not in text and "the nearest to 0.40.0" in text
    newer = recommend("122b", vllm="0.33.0")
    assert any("measured with vLLM 0.26.0" in n for n in newer.notes)


def test_an_answer_reads_in_ten_seconds(probe_cli):
    for args in (
        ("--model", "122b"),
        ("--model", "122b", "--gpu", "sm_110a"),
        ("--model", "nano", "--gpu", "sm_121"),
    ):
        r = probe_cli("recommend", *args)
        assert r.returncode in (0, 3), r.stderr
        lines = r.stdout.splitlines()
        assert len(lines) <= 30, r.stdout
        assert lines[2].lstrip().startswith("vllm serve") or r.returncode == 3  # the flags first


def test_an_unknown_why_not_backend_is_an_error_with_suggestions(probe_cli):
    r = probe_cli("recommend", "--model", "122b", "--why-not", "flashinfer-cutlas")
    assert r.returncode == 2 and "flashinfer_cutlass" in r.stderr and "Traceback" not in r.stderr
    ok = probe_cli("recommend", "--model", "122b", "--why-not", "flashinfer-cutlass")
    assert ok.returncode == 0 and "why not flashinfer_cutlass" in ok.stdout


def test_scan_refuses_a_gpu_the_catalog_does_not_know_as_recommend_does(probe_cli):
    scan = probe_cli("scan", "--target", "sm_999", str(ROOT / "tests" / "fixtures" / "cuda" / "prebuilt"))
    rec = probe_cli("recommend", "--model", "122b", "--gpu", "sm_999")
    assert scan.returncode == rec.returncode == 2
    assert "sm_999" in scan.stderr and "catalog" in scan.stderr


def test_an_image_scan_report_is_the_image(tmp_path):
    """``--image`` with a `probe scan --json` report: its vLLM is the answer's, its distributions the
    image's (here one without flashinfer-python: the needs line says so if the answer uses it)."""
    report = {
        "files": [
            {"package": "vllm", "package_version": "0.33.0"},
            {"package": "torch", "package_version": "2.14.1+cu130"},
        ]
    }
    path = tmp_path / "scan.json"
    path.write_text(json.dumps(report))
    rec = recommend("122b", gpu="sm_100", image=str(path))
    assert rec.vllm_version == "0.33.0" and rec.image == str(path)
