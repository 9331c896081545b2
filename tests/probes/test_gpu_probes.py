"""The probes against a real GPU and a real vLLM (run on the GPU machine; skipped in CI)."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.vllm]


def _need_gpu_and_vllm():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch not installed (GPU-only probe test)")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM not installed")


def test_import_probe_reports_versions_and_gpu():
    _need_gpu_and_vllm()
    from probe.probes import imports
    from probe.probes.common import LocalContext

    r = imports.run({}, LocalContext())
    assert r["outcome"] == "ok"
    assert r["details"]["versions"]["vllm"] and r["details"]["gpu"]["sm"] >= 70
    assert r["details"]["moe_backends"]


@pytest.mark.parametrize(("backend", "quant"), [("triton", "bf16"), ("marlin", "int4_w4a16")])
def test_moe_probe_runs_against_reference(backend, quant):
    _need_gpu_and_vllm()
    from probe.probes import moe
    from probe.probes.common import LocalContext

    ctx = LocalContext()
    r = moe.run(
        {
            "backend": backend,
            "quant": quant,
            "experts": 8,
            "hidden": 1024,
            "intermediate": 256,
            "top_k": 2,
            "batch_sizes": [1, 16],
        },
        ctx,
    )
    assert r["outcome"] == "ok", r
    assert r["ref_error"] < 0.05 and r["timings"]["forward_ms_b1"] > 0
    assert "process_weights" in ctx.phases


def test_moe_probe_refusal_is_unsupported():
    _need_gpu_and_vllm()
    from probe.probes import moe
    from probe.probes.common import LocalContext

    r = moe.run(
        {"backend": "marlin", "quant": "bf16", "experts": 8, "hidden": 1024, "intermediate": 256, "top_k": 2},
        LocalContext(),
    )
    assert r["outcome"] == "unsupported" and "not supported" in r["reason"]
