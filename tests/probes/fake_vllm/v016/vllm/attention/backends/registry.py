# Minimal stand-in for the enumeration surfaces of vLLM 0.16.0 (tests only; no torch).
from enum import Enum


class AttentionBackendEnum(Enum):
    FLASH_ATTN = "vllm.fake.flash_attn"
    TRITON_ATTN = "vllm.fake.triton_attn"
    FLASHINFER = "vllm.fake.flashinfer"
    FLEX_ATTENTION = "vllm.fake.flex_attention"
    TREE_ATTN = "vllm.fake.tree_attn"
