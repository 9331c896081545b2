from vllm.v1.attention.backend import AttentionBackend


class TritonAttentionBackend(AttentionBackend):
    @classmethod
    def supports_sink(cls):
        return True
