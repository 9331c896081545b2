"""Where a report applies: version ranges (fixed / introduced / open past what was seen / unknown),
features (model facts, settings, the reporter's set-up), models; reports_for and workarounds_for."""

from __future__ import annotations

from typing import Any

import pytest

from probe.reports.base import features_fit, reports_for, value_fits, workarounds_for
from probe.reports.ranges import version_status
from probe.reports.record import report_from_dict
from probe.versions import version_key


def _report(**kw: Any):
    base = {
        "id": "t-1",
        "source": "https://github.com/vllm-project/vllm/issues/1",
        "date": "2026-01-02",
        "seen_in": "vllm",
        "gpus": [120],
        "kind": "moe",
        "backend": "cutlass",
        "quant": "nvfp4",
        "outcome": "wrong_output",
        "symptom": "garbage",
        "root_cause": "a kernel bug",
        "checked": "test",
        "versions": {"vllm": ["0.26.0"]},
        "open_as_of": "2026-11-24",
    }
    base.update(kw)
    return report_from_dict(base)


def test_version_key_orders_dev_rc_final_post():
    order = ["0.12.0.dev3", "0.12.0rc1.dev5", "0.12.0rc1", "0.12.0", "0.12.0.post1", "0.12.1"]
    assert sorted(order, key=version_key) == order
    assert version_key("0.12") == version_key("0.12.0")
    assert version_key("0.6.x") is None and version_key("main") is None and version_key("13") is None


def test_a_report_fixed_in_a_release_does_not_apply_from_that_release_on():
    r = _report(open_as_of=None, fixed_in={"vllm": "0.28.0"})
    assert version_status(r, {"vllm": "0.27.1"}).applies
    st = version_status(r, {"vllm": "0.33.0"})
    assert not st.applies and st.state == "fixed" and "fixed in vLLM 0.28.0" in st.note


def test_an_open_report_applies_past_what_was_seen_and_says_so():
    st = version_status(_report(), {"vllm": "0.33.0"})
    assert st.applies and st.state == "newer_than_seen"
    assert "seen up to vLLM 0.26.0, open as of 2026-11-24" in st.note and "0.33.0" in st.note


def test_a_fix_without_a_release_stops_at_the_newest_version_seen():
    r = _report(open_as_of=None, fixed_in={"pr": "https://github.com/vllm-project/vllm/pull/2"})
    assert version_status(r, {"vllm": "0.26.0"}).applies
    st = version_status(r, {"vllm": "0.33.0"})
    assert st.state == "maybe_fixed" and not st.applies and "release not recorded" in st.note


def test_introduced_in_bounds_the_range_from_below():
    r = _report(introduced_in={"vllm": "0.25.0"})
    assert version_status(r, {"vllm": "0.24.0"}).state == "before"
    assert version_status(r, {"vllm": "0.25.1"}).applies


def test_unknown_versions_apply_to_open_reports_only():
    open_ = _report(versions={}, versions_text="vLLM main (2026-04)")
    st = version_status(open_, {"vllm": "0.33.0"})
    assert st.applies and st.state == "unknown" and "main (2026-04)" in st.note
    fixed = _report(versions={}, open_as_of=None, fixed_in={"pr": "https://github.com/x/y/pull/1"})
    assert not version_status(fixed, {"vllm": "0.33.0"}).applies
    assert version_status(_report(), {}).applies  # nothing asked: an open report counts


def test_other_packages_ranges_apply_when_asked():
    r = _report(versions={"flashinfer": ["0.6.7"]}, open_as_of=None, fixed_in={"flashinfer": "0.6.7.post2"})
    assert version_status(r, {"flashinfer": "0.6.7"}).applies
    assert version_status(r, {"flashinfer": "0.6.8"}).state == "fixed"


@pytest.mark.parametrize(
    ("wanted", "given", "fits"),
    [("fp8", "fp8_e4m3", True), ("fp8", "auto", False), (">1", 2, True), (">1", 1, False), (256, 256, True),
     (True, False, False), ("mtp", None, False)],
)  # fmt: skip
def test_feature_values(wanted, given, fits):
    assert value_fits(wanted, given) is fits


def test_settings_must_be_on_model_facts_must_match_setup_is_no_condition():
    assert not features_fit({"kv_cache_dtype": "fp8"}, {})  # vLLM's default KV cache is not fp8
    assert features_fit({"kv_cache_dtype": "fp8"}, {"kv_cache_dtype": "fp8_e4m3"})
    assert features_fit({"dtype": "bf16"}, {})  # the default dtype
    assert not features_fit({"head_size": 256}, {"head_size": 128})
    assert features_fit({"head_size": 256}, {})  # a model fact not given does not rule it out
    assert features_fit({"tp": 4, "cuda_graphs": True}, {"tp": 1})


def test_reports_for_the_spark_and_a_backend():
    spark = reports_for(121)
    assert len(spark) >= 20 and all(121 in r.gpus for r, _ in spark)
    marlin = reports_for(121, "marlin", "moe", vllm_version="0.33.0")
    assert marlin and all(r.backend == "marlin" and st.applies for r, st in marlin)
    fixed = [r for r, _ in reports_for(None, vllm_version="0.33.0") if r.fixed_in.get("vllm")]
    assert all(version_key(r.fixed_in["vllm"]) > version_key("0.33.0") for r in fixed)


def test_workarounds_for_a_backend_carry_flags_or_env():
    found = workarounds_for(120, "cutlass", "moe", "nvfp4", vllm_version="0.33.0")
    assert found and all(w.flags or w.env or w.note for _, w in found)
    assert any("marlin" in w.flags for _, w in found)


def test_a_model_specific_report_needs_its_model():
    r = _report(model_specific=True, models=["MrVolts/Qwen3-30B-A3B-Thinking-2507-NVFP4"])
    assert reports_for(120, reports=[r], model="Qwen/Qwen3-30B-A3B-Thinking-2507")
    assert not reports_for(120, reports=[r], model="Qwen3.5-122B-A10B")
