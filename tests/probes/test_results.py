"""Result records a probe returns, and their fit to the sandbox's CellResult."""

from __future__ import annotations

import pytest

from probe.cells import CellResult
from probe.outcomes import Outcome
from probe.probes.common import RESULT_KEYS, LocalContext, result, skipped, unsupported


def test_ok_record_shape():
    r = result("ok", timings={"forward_ms_b1": 0.41234567}, ref_error=0.004, details={"x": 1})
    assert tuple(r) == RESULT_KEYS
    assert r["timings"] == {"forward_ms_b1": 0.4123}
    assert r["root_cause"] is None and r["hint"] is None
    cell = CellResult(
        id="moe/x",
        kind="moe",
        outcome=r["outcome"],
        timings=r["timings"],
        ref_error=r["ref_error"],
        details=r["details"],
        degraded_reasons=r["degraded_reasons"],
    )
    assert cell.outcome is Outcome.OK


def test_non_ok_needs_reason_and_gets_a_hint():
    with pytest.raises(ValueError):
        result("wrong_output")
    u = unsupported(
        "ValueError: moe_backend='marlin' is not supported for unquantized MoE. "
        "Expected one of ['triton', 'flashinfer_trtllm']."
    )
    assert u["outcome"] == "unsupported" and "['triton', 'flashinfer_trtllm']" in u["hint"]
    assert u["root_cause"] == u["reason"]
    s = skipped("vLLM 0.16.0 has no --moe-backend")
    assert s["outcome"] == "skipped" and s["hint"]
    w = result("wrong_output", "relative L2 error 0.9 > tolerance 0.02")
    assert "reference" in w["hint"]


def test_probe_cannot_claim_sandbox_outcomes():
    with pytest.raises(ValueError):
        result("device_fault", "illegal address")


def test_local_context_records_phases():
    ctx = LocalContext()
    ctx.phase("build")
    ctx.phase("forward")
    ctx.note("selected", "MARLIN")
    assert ctx.phases == ["build", "forward"] and ctx.notes == {"selected": "MARLIN"}


def test_quant_names_agree_with_the_model_catalog():
    from probe.catalog.models import QUANTS as CATALOG_QUANTS
    from probe.probes.moe import QUANT_CONFIGS, QUANTS
    from probe.probes.quant_ref import TOLERANCE

    assert QUANTS == CATALOG_QUANTS and set(QUANT_CONFIGS) == set(TOLERANCE) == set(QUANTS)


@pytest.mark.parametrize(
    ("quant", "hidden", "inter", "skips"),
    [
        ("fp8_block", 2880, 2880, True),  # gpt-oss's shape: vLLM's fp8.py refuses 2880 % 128 (H100 run)
        ("fp8_block", 7168, 256, False),  # DeepSeek-V3's shape
        ("int4_w4a16", 2880, 2880, True),
        ("mxfp4", 2880, 2880, False),
        ("nvfp4", 7168, 200, True),
        ("bf16", 2880, 2880, False),
        ("fp8", 2880, 2880, False),
    ],
)
def test_moe_shapes_without_checkpoints_skip(quant: str, hidden: int, inter: int, skips: bool) -> None:
    from probe.catalog.quants import shape_skip_reason

    reason = shape_skip_reason(quant, hidden, inter)
    assert (reason is not None) == skips
    if reason:
        assert f"hidden {hidden}" in reason and quant in reason
