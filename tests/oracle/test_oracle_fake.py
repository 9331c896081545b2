"""The oracle end to end against small fake vLLM trees.

fake_vllm/v026 and v033 (each the shared fake_vllm/base plus its own overlay, assembled by
conftest.fake_vllm_tree) mirror the real API shapes of those releases; v020 has none of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.catalog.gpus import parse_target
from probe.matrix.schema import Matrix
from probe.modelcfg.resolve import resolve_model
from probe.oracle.collect import run_child
from probe.oracle.queries import attention_queries, moe_queries, plan
from probe.oracle.to_matrix import build_matrix

FAKE = Path(__file__).parent / "fake_vllm"


@pytest.fixture(scope="module", params=["v026", "v033"])
def matrix(request, fake_vllm_tree) -> Matrix:
    req = plan(
        [parse_target(t) for t in ("sm_89", "sm_90", "sm_100")],
        [resolve_model(m) for m in ("120b", "dsv3", "122b")],
    )
    run = run_child(req, pythonpath=[str(fake_vllm_tree(request.param))], timeout_s=120)
    assert run.skipped is None, run.skipped
    return build_matrix(req, run)


def cell(m: Matrix, cid: str):
    found = [c for c in m.cells if c.id == cid]
    assert found, f"no cell {cid}; have e.g. {[c.id for c in m.cells[:5]]}"
    return found[0]


def test_every_cell_is_predicted_by_vllm_check(matrix):
    assert matrix.cells
    assert {c.evidence for c in matrix.cells} == {"predicted"}
    assert {c.basis for c in matrix.cells} == {"vllm_check"}
    assert all(c.gpu_sm in (89, 90, 100) for c in matrix.cells)
    Matrix.model_validate_json(matrix.model_dump_json())  # round-trips through the schema


def test_sinks_refused_by_fa2_with_vllms_message_and_check_location(matrix):
    c = cell(matrix, "predicted/vllm/attention/sm_89/gpt-oss-120b/FLASH_ATTN")
    assert c.outcome.value == "unsupported"
    assert "attention sinks not supported" in (c.root_cause or "")
    assert c.root_cause.startswith("Selected backend AttentionBackendEnum.FLASH_ATTN is not valid")
    assert c.details["check"] == "FlashAttentionBackend.supports_sink"
    assert c.details["file"] == "vllm/v1/attention/backends/flash_attn.py" and c.details["line"] > 0
    ok = cell(matrix, "predicted/vllm/attention/sm_90/gpt-oss-120b/FLASH_ATTN")
    assert ok.outcome.value == "ok" and ok.fa_version == 3


def test_auto_pick_follows_the_platform_priority(matrix):
    a89 = cell(matrix, "predicted/vllm/attention/sm_89/gpt-oss-120b/auto")
    assert a89.details["selected"] == "TRITON_ATTN"  # FA2 refuses sinks, FlashInfer does not import
    assert a89.details["auto_order"][0] == "FLASH_ATTN"
    mla = cell(matrix, "predicted/vllm/attention/sm_89/deepseek-v3/FLASHMLA")
    assert mla.root_cause and "compute capability not supported" in mla.root_cause
    assert cell(matrix, "predicted/vllm/attention/sm_100/deepseek-v3/auto").details["selected"] == "FLASHMLA"


def test_missing_module_is_vllms_import_refusal(matrix):
    c = cell(matrix, "predicted/vllm/attention/sm_90/qwen3.5-122b-a10b/FLASHINFER")
    assert c.outcome.value == "unsupported" and "No module named 'flashinfer'" in (c.root_cause or "")
    assert c.details["check"] == "import"


def test_moe_kernel_refusal_names_the_experts_check(matrix):
    c = cell(matrix, "predicted/vllm/moe/sm_90/deepseek-v3/nvfp4/cutlass")
    assert c.outcome.value == "unsupported" and c.tp is None and c.details["tp_sizes"] == [1, 2, 4]
    assert "does not support the deployment configuration since kernel does not support current device" in (
        c.root_cause or ""
    )
    assert c.details["check"] == "CutlassExperts._supports_current_device"
    assert c.details["raised_at"].startswith("vllm/model_executor/layers/fused_moe/oracle/_common.py:")
    assert cell(matrix, "predicted/vllm/moe/sm_100/deepseek-v3/nvfp4/cutlass").outcome.value == "ok"


def test_tp_dependent_verdicts_get_one_cell_per_tp(matrix):
    one = cell(matrix, "predicted/vllm/moe/sm_90/qwen3.5-122b-a10b/nvfp4/marlin/tp=1")
    four = cell(matrix, "predicted/vllm/moe/sm_90/qwen3.5-122b-a10b/nvfp4/marlin/tp=4")
    assert one.outcome.value == "ok" and one.tp == 1 and one.intermediate == 1024
    assert four.outcome.value == "unsupported" and four.intermediate == 256
    assert four.details["check"] == "MarlinExperts._supports_parallel_config"
    auto4 = cell(matrix, "predicted/vllm/moe/sm_90/qwen3.5-122b-a10b/nvfp4/auto/tp=4")
    assert auto4.root_cause == "No NvFp4 MoE backend supports the deployment configuration."


def test_unmapped_backend_and_missing_oracle(matrix):
    c = cell(matrix, "predicted/vllm/moe/sm_90/qwen3.5-122b-a10b/bf16/marlin")
    assert c.root_cause == "moe_backend='marlin' is not supported for Unquantized MoE."
    skipped = cell(matrix, "predicted/vllm/moe/sm_90/gpt-oss-120b/mxfp4/auto")
    assert skipped.outcome.value == "skipped" and "not in this vLLM" in (skipped.root_cause or "")


def test_version_without_adapter_is_skipped_with_the_reason():
    req = plan([parse_target("sm_90")], [resolve_model("120b")])
    run = run_child(req, pythonpath=[str(FAKE / "v020")], timeout_s=120)
    assert run.skipped and "no oracle adapter for vLLM 0.20.0" in run.skipped
    m = build_matrix(req, run)
    assert [c.outcome.value for c in m.cells] == ["skipped"] and m.run.status == "partial"


def test_plan_reads_the_profiles():
    # a packaged profile: its kinds derived from its fields (gpt-oss: 18 sliding + 18 full layers, sinks)
    sliding, full = attention_queries(resolve_model("120b"))
    assert (
        sliding.has_sink and sliding.has_sliding_window and sliding.head_size == 64 and sliding.layers == 18
    )
    assert full.has_sink and not full.has_sliding_window and full.kind == "full+sink d=64 h=64/8"
    (ds,) = attention_queries(resolve_model("dsv3"))
    assert ds.use_mla and ds.head_size == 576  # kv_lora_rank + qk_rope_head_dim
    sup = moe_queries(resolve_model("super"))
    assert {q.hidden for q in sup} == {1024}  # LatentMoE width
    assert {(q.quant, q.tp) for q in moe_queries(resolve_model("dsv3"))} >= {("nvfp4", 4), ("fp8_block", 1)}
    assert moe_queries(resolve_model("qwen3-8b")) == []


def test_a_check_that_touched_the_gpu_is_no_refusal():
    from probe.oracle._child_base import needs_gpu

    assert needs_gpu("RuntimeError: Found no NVIDIA driver on your system.")
    assert needs_gpu("No CUDA GPUs are available")  # CUDA_VISIBLE_DEVICES emptied on a GPU box
    assert not needs_gpu("attention sinks not supported")


@pytest.mark.slow
@pytest.mark.parametrize("version", ["v026", "v033"])
def test_a_verdict_does_not_depend_on_the_other_targets_asked(version, fake_vllm_tree):
    """vLLM caches capability probes per process (the fake's ``is_deep_gemm_supported`` is a
    ``functools.cache``d check, as vLLM's is): asking sm_75 first must not decide sm_90's answer."""
    path = [str(fake_vllm_tree(version))]
    prof = [resolve_model("30b-a3b")]

    def deep_gemm_ok(targets: tuple[str, ...], sm: int) -> bool:
        req = plan([parse_target(t) for t in targets], prof, tps=(1,))
        run = run_child(req, pythonpath=path, timeout_s=120)
        m = build_matrix(req, run)
        found = [c for c in m.cells if c.gpu_sm == sm and c.backend == "deep_gemm" and c.tp in (None, 1)]
        assert found, [c.id for c in m.cells if c.gpu_sm == sm]
        return found[0].outcome.value == "ok"

    alone = deep_gemm_ok(("sm_90",), 90)
    after_turing = deep_gemm_ok(("sm_75", "sm_90"), 90)
    assert alone is True
    assert after_turing is alone
    assert deep_gemm_ok(("sm_90", "sm_75"), 75) is deep_gemm_ok(("sm_75",), 75) is False


CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"


@pytest.fixture(scope="module")
def config_matrix(fake_vllm_tree) -> tuple[Matrix, object]:
    """Models read from real configs: Gemma-4 (sliding d=256 + global d=512 layers) and its NVFP4
    export, Qwen3.6's NVFP4 export (W4A16 experts), DeepSeek-V4 (attention outside the selector)."""
    names = ("google--gemma-4-26B-A4B", "nvidia--Qwen3.6-35B-A3B-NVFP4", "deepseek-ai--DeepSeek-V4-Flash")
    req = plan([parse_target("sm_90")], [resolve_model(str(CONFIGS / n)) for n in names])
    run = run_child(req, pythonpath=[str(fake_vllm_tree("v033"))], timeout_s=120)
    assert run.skipped is None, run.skipped
    return build_matrix(req, run), req


def test_a_backend_is_accepted_only_if_every_attention_kind_is(config_matrix):
    m, req = config_matrix
    gemma = [q for q in req.attention if q.model == "google--gemma-4-26b-a4b" and q.kv_cache_dtype == "auto"]
    assert [(q.head_size, q.num_kv_heads, q.has_sliding_window, q.layers) for q in gemma] == [
        (256, 8, True, 25),
        (512, 2, False, 5),
    ]
    fa = cell(m, "predicted/vllm/attention/sm_90/google--gemma-4-26b-a4b/FLASH_ATTN")
    assert fa.outcome.value == "unsupported"  # the fake FA takes head sizes <= 256: the global layers
    assert fa.details["refused_by"] == "full d=512 h=16/2" and "head_size" in (fa.root_cause or "")
    verdicts = {k["kind"]: k["ok"] for k in fa.details["kinds"]}
    assert verdicts == {"sliding d=256 h=16/8": True, "full d=512 h=16/2": False}
    assert (fa.head_dim, fa.num_heads, fa.num_kv_heads) == (256, 16, 8)  # the main kind's shape
    assert fa.params["attention_kinds"] == 2
    triton = cell(m, "predicted/vllm/attention/sm_90/google--gemma-4-26b-a4b/TRITON_ATTN")
    assert triton.outcome.value == "ok" and "refused_by" not in triton.details


def test_one_kind_keeps_the_cell_as_it_was(config_matrix):
    m, _ = config_matrix
    c = cell(m, "predicted/vllm/attention/sm_90/nvidia--qwen3.6-35b-a3b-nvfp4/FLASH_ATTN")
    assert "kinds" not in c.details and "attention_kinds" not in c.params


def test_moe_is_asked_with_the_experts_own_scheme(config_matrix):
    m, req = config_matrix
    schemes = {q.model: q.quant for q in req.moe}
    assert schemes["nvidia--qwen3.6-35b-a3b-nvfp4"] == "nvfp4_w4a16"  # experts W4A16, linear layers FP8
    assert schemes["deepseek-ai--deepseek-v4-flash"] == "mxfp4"  # expert_dtype fp4 under deepseek_v4_fp8
    assert schemes["google--gemma-4-26b-a4b"] == "bf16"
    assert not [q for q in req.attention if q.model == "deepseek-ai--deepseek-v4-flash"]
    assert any(
        c.id.startswith("predicted/vllm/moe/sm_90/nvidia--qwen3.6-35b-a3b-nvfp4/nvfp4_w4a16/")
        for c in m.cells
    )
