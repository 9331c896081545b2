import enum
import importlib


class AttentionBackendEnum(enum.Enum):
    FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
    FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"
    TRITON_ATTN = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"
    FLASHMLA = "vllm.v1.attention.backends.mla.FlashMLABackend"
    TRITON_MLA = "vllm.v1.attention.backends.mla.TritonMLABackend"
    ROCM_ATTN = "vllm.v1.attention.backends.rocm.RocmBackend"

    def get_path(self):
        return self.value

    def get_class(self):
        module, _, name = self.value.rpartition(".")
        return getattr(importlib.import_module(module), name)
