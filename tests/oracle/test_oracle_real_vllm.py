"""The oracle against a real vLLM 0.33.0 (cached venv, CPU only); skipped with the reason when absent
(tests/oracle/real_vllm.py). Importing the real vLLM in the child: about 40 s."""

from __future__ import annotations

import pytest

from probe.catalog.gpus import parse_target
from probe.modelcfg.resolve import resolve_model
from probe.oracle.collect import run_child
from probe.oracle.queries import plan
from probe.oracle.to_matrix import build_matrix
from tests.oracle.real_vllm import MARKS, PY

pytestmark = MARKS


@pytest.fixture(scope="module")
def matrix():
    req = plan(
        [parse_target(t) for t in ("sm_80", "sm_89", "sm_90", "sm_100", "sm_120")],
        [resolve_model(m) for m in ("120b", "dsv3", "122b")],
    )
    run = run_child(req, python=str(PY), timeout_s=600)
    assert run.skipped is None, run.skipped
    assert run.versions["vllm"].startswith("0.33.0")
    return build_matrix(req, run)


def cell(m, cid):
    found = [c for c in m.cells if c.id == cid]
    assert found, cid
    return found[0]


def test_gpt_oss_sinks_refused_by_fa2_on_ampere_and_ada(matrix):
    for sm in (80, 89):
        c = cell(matrix, f"predicted/vllm/attention/sm_{sm}/gpt-oss-120b/FLASH_ATTN")
        assert c.outcome.value == "unsupported", c.root_cause
        assert "sink" in (c.root_cause or "")
        assert c.details["file"].startswith("vllm/v1/attention/backends/flash_attn.py")
        auto = cell(matrix, f"predicted/vllm/attention/sm_{sm}/gpt-oss-120b/auto")
        assert auto.details.get("selected") != "FLASH_ATTN"


def test_mla_backends_for_deepseek(matrix):
    auto = cell(matrix, "predicted/vllm/attention/sm_90/deepseek-v3/auto")
    assert auto.outcome.value == "ok" and auto.details["selected"] == "FLASH_ATTN_MLA"
    sparse = cell(matrix, "predicted/vllm/attention/sm_90/deepseek-v3/FLASH_ATTN_MLA_SPARSE")
    assert sparse.outcome.value == "unsupported" and "non-sparse not supported" in (sparse.root_cause or "")
    # CUTLASS_MLA's check asks the driver: the oracle cannot ask on a CPU machine, and says so
    cutlass = cell(matrix, "predicted/vllm/attention/sm_100/deepseek-v3/CUTLASS_MLA")
    assert cutlass.outcome.value == "skipped"


def test_moe_auto_picks_something_on_hopper_for_every_quant(matrix):
    for quant in ("bf16", "fp8_block", "nvfp4"):
        autos = [
            c
            for c in matrix.cells
            if c.id.startswith(f"predicted/vllm/moe/sm_90/qwen3.5-122b-a10b/{quant}/auto")
        ]
        assert autos and all(c.outcome.value == "ok" for c in autos), [(c.id, c.root_cause) for c in autos]


def test_refusals_carry_vllm_source_locations(matrix):
    refused = [
        c
        for c in matrix.cells
        if c.outcome.value == "unsupported" and str(getattr(c.kind, "value", c.kind)) == "moe"
    ]
    assert refused
    with_loc = [c for c in refused if c.details.get("file") and c.details.get("line")]
    assert len(with_loc) / len(refused) > 0.9
