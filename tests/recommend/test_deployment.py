"""How the served set-up, the vLLM version and vLLM's own pick shape an answer, against the published
predictions (matrices/predicted/): the KV-cache dtype, expert parallelism and speculative decoding
change the answer exactly where vLLM's checks or a field report do; each answer speaks for one vLLM
version; on a GPU nobody measured, vLLM's own pick wins unless a printed reason says otherwise; and
every backend an answer passes over is named with its reason."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from probe.catalog.backends import catalog as backend_catalog
from probe.catalog.models import load_profiles
from probe.recommend.recommender import recommend
from probe.recommend.types import Deployment, Recommendation

ROOT = Path(__file__).resolve().parents[2]
MATRICES = [ROOT / "matrices"]
PREDICTED = ROOT / "matrices" / "predicted"
pytestmark = pytest.mark.skipif(
    not (PREDICTED / "vllm-0.33.0" / "sm_100.json.gz").is_file(), reason="no published predictions"
)


@cache
def _predicted(version: str, sm: int) -> list[dict[str, Any]]:
    doc = json.loads(gzip.decompress((PREDICTED / f"vllm-{version}" / f"sm_{sm}.json.gz").read_bytes()))
    return [c for c in doc["cells"] if c.get("basis") == "vllm_check"]


def _answer(model: str, gpu: str, version: str = "0.33.0", **deploy: Any) -> Recommendation:
    return recommend(model, gpu=gpu, matrices=MATRICES, vllm=version, deploy=Deployment(**deploy))


def _ruled(out: Recommendation, backend: str, source: str) -> list[dict[str, Any]]:
    return [r for r in out.ruled_out if r["backend"] == backend and r["source"] == source]


# ------------------------------------------------------------------ the served set-up


@pytest.mark.parametrize("version", ["0.26.0", "0.33.0"])
def test_fp8_kv_cache_moves_off_a_backend_vllm_refuses_it_for(version):
    auto = _answer("llama-70b", "sm_120", version)
    fp8 = _answer("llama-70b", "sm_120", version, kv_cache_dtype="fp8")
    assert auto.attention_backend == "FLASH_ATTN"
    assert fp8.attention_backend not in (None, "FLASH_ATTN")
    (refusal,) = _ruled(fp8, "FLASH_ATTN", "vllm_check")
    assert "kv_cache_dtype not supported" in refusal["reason"] and refusal["vllm"] == version
    cited = [e["id"] for e in fp8.evidence if e["role"] == "attention" and "/vllm/" in e["id"]]
    assert cited and all(i.endswith("/kv=fp8") for i in cited)  # vLLM was asked with the FP8 cache


def test_fp8_kv_cache_keeps_a_backend_vllm_accepts_it_for():
    auto = _answer("122b", "sm_100")
    fp8 = _answer("122b", "sm_100", kv_cache_dtype="fp8")
    assert fp8.attention_backend == auto.attention_backend == "FLASHINFER"


def test_expert_parallel_moves_off_a_moe_backend_vllm_refuses_it_for():
    alone = _answer("nano", "sm_110", "0.26.0")
    ep = _answer("nano", "sm_110", "0.26.0", ep=True)
    assert alone.moe_backend == "cutlass"
    assert ep.moe_backend not in (None, "cutlass")
    (refusal,) = _ruled(ep, "cutlass", "vllm_check")  # read at TP=2: EP on one DP rank spans TP ranks
    assert "does not support parallel config" in refusal["reason"]
    moe_ids = [e["id"] for e in ep.evidence if e["role"] == "moe" and "/vllm/" in e["id"]]
    assert moe_ids and all("/ep/" in i for i in moe_ids)


def test_expert_parallel_brings_in_the_reports_that_need_it():
    alone = _answer("122b", "sm_100")
    ep = _answer("122b", "sm_100", ep=True)
    assert alone.moe_backend == "flashinfer_trtllm" and not _ruled(alone, "flashinfer_trtllm", "reported")
    assert ep.moe_backend not in (None, "flashinfer_trtllm")
    assert _ruled(ep, "flashinfer_trtllm", "reported")


def test_speculative_decoding_brings_in_the_reports_that_need_it():
    """DFlash's drafter runs non-causal attention: the GB10 report of FA2 faulting on it applies
    only when the answer is asked for DFlash."""
    plain = _answer("122b", "sm_121", "0.26.0")
    dflash = _answer("122b", "sm_121", "0.26.0", speculative="dflash")
    assert plain.attention_backend == "FLASH_ATTN" and not _ruled(plain, "FLASH_ATTN", "reported")
    assert dflash.attention_backend not in (None, "FLASH_ATTN")
    reports = _ruled(dflash, "FLASH_ATTN", "reported")  # the GB10 report, then its sm_120 siblings'
    assert reports[0]["fa_version"] == 2 and "50707" in reports[0]["link"]


# ------------------------------------------------------------------ one version per answer


def test_each_version_answers_with_its_own_checks_and_flags():
    old, new = _answer("30b-a3b", "sm_110", "0.26.0"), _answer("30b-a3b", "sm_110", "0.33.0")
    for out, version in ((old, "0.26.0"), (new, "0.33.0")):
        assert out.vllm_version == out.flags_for_vllm == version
        assert {r["vllm"] for r in out.ruled_out if r["source"] == "vllm_check"} == {version}
        assert all(f"vllm-{version}" in e["file"] for e in out.evidence if "/vllm/" in e["id"])
    assert old.moe_backend != new.moe_backend  # 0.33.0 dropped the humming path 0.26.0 takes here


# ------------------------------------------------------------------ vLLM's own pick


def _moe_name(selected: str) -> str:
    """vLLM's enum name of the MoE backend it selected as a ``--moe-backend`` value
    (FLASHINFER_TRTLLM_MXFP4_BF16 -> flashinfer_trtllm, VLLM_CUTLASS -> cutlass)."""
    s = selected.lower().removeprefix("vllm_").replace("deepgemm", "deep_gemm")
    names = [b.name for b in backend_catalog().backends if b.kind == "moe" and s.startswith(b.name)]
    return max(names, key=len) if names else s


def _own_picks(version: str, sm: int, model: str, quant: str) -> dict[str, str]:
    picks: dict[str, str] = {}
    for c in _predicted(version, sm):
        if (
            c["backend"] != "auto"
            or c["outcome"] != "ok"
            or c.get("model") != model
            or c.get("params", {}).get("kv_cache_dtype")
        ):
            continue
        if c["kind"] == "attention":
            picks["attention"] = c["details"]["selected"]
        elif c.get("quant") == quant and "/ep" not in c["id"]:
            picks["moe"] = _moe_name(c["details"]["selected"])
    return picks


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.26.0", "0.33.0"])
def test_on_b200_the_answer_is_vllms_own_pick_or_says_why_not(version):
    departures = 0
    for prof in load_profiles():
        out = _answer(prof.name, "sm_100", version)
        assert out.found, (prof.name, out.warnings)
        got = {"attention": out.attention_backend, "moe": out.moe_backend}
        for role, pick in _own_picks(version, 100, prof.slug, prof.quant).items():
            if got[role] in (pick, "auto"):  # "auto": vLLM's own pick by definition
                continue
            departures += 1
            said = f"vLLM's own pick for the {role} half here is {pick}, not {got[role]}: "
            assert any(w.startswith(said) and len(w) > len(said) for w in out.warnings), (prof.name, role)
    # a departure is the exception, each with its evidence: on B200 the field reports of FlashInfer's
    # TRT-LLM-gen MoE faulting (the bf16 autotune sweep, gpt-oss MXFP4, Nemotron's ReLU2) move 6-7 of
    # the 20 profiles off vLLM's pick
    assert departures < len(load_profiles()) // 2


def test_an_answer_that_lets_vllm_pick_is_no_departure_from_its_pick():
    from probe.recommend.explain import departures

    assert departures({"moe": "marlin"}, {"moe": "auto"}, [], {}) == []
    said = departures({"moe": "marlin"}, {"moe": "cutlass"}, [], {"moe": "slower"})
    assert said == ["vLLM's own pick for the moe half here is marlin, not cutlass: slower"]


# ------------------------------------------------------------------ what was passed over


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["sm_100", "sm_110", "sm_120", "sm_121"])
def test_every_backend_vllm_refuses_for_the_model_is_named_with_its_reason(gpu):
    sm = int(gpu[3:])
    for prof in load_profiles():
        out = _answer(prof.name, gpu)
        named = {(r["role"], r["backend"]) for r in out.ruled_out if r["reason"]}
        chosen = {("moe", out.moe_backend), ("attention", out.attention_backend)}
        for c in _predicted("0.33.0", sm):
            if c.get("model") != prof.slug or c["backend"] == "auto" or c["outcome"] in ("ok", "skipped"):
                continue
            if "/kv=" in c["id"] or "/ep" in c["id"] or c.get("quant") not in (None, prof.quant):
                continue
            if any(o["id"].startswith(c["id"].rsplit("/tp=", 1)[0]) for o in _accepted(sm, prof.slug)):
                continue  # refused at one TP, accepted at another: not ruled out
            key = (c["kind"], c["backend"])
            assert key in named or key in chosen, (prof.name, gpu, key)


def _accepted(sm: int, model: str) -> list[dict[str, Any]]:
    return [c for c in _predicted("0.33.0", sm) if c.get("model") == model and c["outcome"] == "ok"]
