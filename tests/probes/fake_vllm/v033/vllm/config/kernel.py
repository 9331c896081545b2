# Minimal stand-in for the enumeration surfaces of vLLM 0.33.0 (tests only; no torch).
from typing import Literal

MoEBackend = Literal[
    "auto",
    "triton",
    "batched_triton",
    "deep_gemm",
    "deep_gemm_mega_moe",
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_moe_ep_cutedsl",
    "flashinfer_b12x",
    "b12x",
    "flashinfer_moe_ep_mega_deep_gemm",
    "marlin",
    "humming",
    "triton_unfused",
    "aiter",
    "aiter_mega_moe",
    "aiter_triton_mxfp4_bf16",
    "aiter_triton_mxfp4_mxfp4",
    "flydsl",
    "hpc",
    "emulation",
    "rdna3",
]
