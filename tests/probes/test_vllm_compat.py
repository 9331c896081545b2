"""Backend enumeration and version adapters, against fake vLLM trees of 0.16 / 0.26 / 0.33."""

from __future__ import annotations

import pytest

from probe.probes import vllm_compat as vc

from .conftest import FAKE

V026_MOE = [
    "triton",
    "deep_gemm",
    "deep_gemm_mega_moe",
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_b12x",
    "marlin",
    "humming",
    "triton_unfused",
    "aiter",
    "flydsl",
    "hpc",
    "emulation",
]


def test_static_info_026_reads_source_without_import():
    info = vc.static_info([str(FAKE / "v026")])
    assert info.installed and info.version == "0.26.0"
    assert info.moe_backends == V026_MOE  # 'auto' dropped, order kept
    assert "FLASH_ATTN" in info.attention_backends and "FLEX_ATTENTION" in info.attention_backends
    assert info.fa_versions_declared == [2, 3, 4]
    assert vc.probed_attention_backends(info.attention_backends) == [
        "FLASH_ATTN",
        "TRITON_ATTN",
        "FLASHINFER",
        "FLEX_ATTENTION",
    ]


def test_static_info_033_has_newer_values():
    info = vc.static_info([str(FAKE / "v033")])
    assert info.version == "0.33.0"
    assert "batched_triton" in info.moe_backends and "rdna3" in info.moe_backends
    assert "batched_triton" not in V026_MOE
    # 0.33-only members that are arch/model specific are not probed as plain decoder backends
    probed = vc.probed_attention_backends(info.attention_backends)
    assert "TRITON_FLASH_ATTN" not in probed and "B12X" not in probed and "TURBOQUANT" not in probed
    mla = vc.probed_attention_backends(info.attention_backends, mla=True)
    assert "FLASHMLA" in mla and "TRITON_MLA" in mla and "FLASH_ATTN" not in mla


def test_known_moe_backends_cover_every_release_read():
    # the fallback superset (the backend catalog's MoE records) holds every value 0.26 and 0.33 accept
    known = set(vc.known_moe_backends())
    for tag in ("v026", "v033"):
        assert set(vc.static_info([str(FAKE / tag)]).moe_backends) <= known, tag


def test_static_info_016_has_no_moe_flag_and_old_enum_path():
    info = vc.static_info([str(FAKE / "v016")])
    assert info.moe_backends is None
    assert "TREE_ATTN" in info.attention_backends  # found under vllm/attention/backends/registry.py
    assert info.fa_versions_declared == [2, 3]


def test_static_info_not_installed(tmp_path):
    assert vc.static_info([str(tmp_path)]).installed is False


def test_runtime_enumeration_matches_static(fake_vllm):
    tag, root = fake_vllm
    accepted, version = vc.runtime_moe_backends()
    assert accepted == vc.static_info([str(root)]).moe_backends
    assert version == {"v026": "0.26.0", "v033": "0.33.0"}[tag]
    assert vc.moe_backend_skip_reason("triton") is None
    assert set(vc.runtime_attention_backends()) == set(vc.static_info([str(root)]).attention_backends)


def test_runtime_skip_reason_for_value_not_accepted(fake_vllm_tree):
    fake_vllm_tree("v026")
    reason = vc.moe_backend_skip_reason("batched_triton")
    assert reason is not None and "not accepted by vLLM 0.26.0" in reason and "marlin" in reason


def test_runtime_old_vllm_without_flag_is_skipped_with_reason(fake_vllm_tree):
    fake_vllm_tree("v016")
    reason = vc.moe_backend_skip_reason("marlin")
    assert reason is not None and "vLLM 0.16.0 has no --moe-backend" in reason
    assert "VLLM_USE_FLASHINFER_MOE_FP4" in reason
    assert "TREE_ATTN" in vc.runtime_attention_backends()


@pytest.mark.parametrize(("tag", "name"), [("v026", "FusedMoE"), ("v033", "FusedMoEFactory")])
def test_fused_moe_factory_per_version(fake_vllm_tree, tag, name):
    fake_vllm_tree(tag)
    fn = vc.fused_moe_factory()
    assert fn(num_experts=8)[0] == name


@pytest.mark.parametrize(
    ("msg", "refusal"),
    [
        ("moe_backend='marlin' is not supported for unquantized MoE. Expected one of ['triton'].", True),
        ("vLLM CUTLASS FP8 MoE backend is disabled for this configuration.", True),
        (
            "NvFp4 MoE backend 'VLLM_CUTLASS' does not support the deployment configuration since kernel "
            "does not support current device cuda.",
            True,
        ),
        ("No FP8 MoE backend supports the deployment configuration.", True),
        ("Selected backend FLASHINFER is not valid for this configuration. Reason: ['x']", True),
        ("shape mismatch: [4, 8] vs [8, 4]", False),
    ],
)
def test_refusal_messages(msg, refusal):
    assert vc.is_refusal(ValueError(msg)) is refusal
    assert vc.is_refusal(RuntimeError(msg)) is False  # only ValueError / NotImplementedError refuse cleanly
