from vllm.v1.attention.backend import AttentionBackend
from vllm.v1.attention.backends.fa_utils import get_flash_attn_version


class FlashAttentionBackend(AttentionBackend):
    @classmethod
    def supports_head_size(cls, head_size):
        return head_size % 8 == 0 and head_size <= 256

    @classmethod
    def supports_sink(cls):
        return get_flash_attn_version() in (3, 4)

    @classmethod
    def supports_compute_capability(cls, capability):
        return capability >= (8, 0)
