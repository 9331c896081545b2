from vllm.v1.attention.backend import AttentionBackend


class FlashMLABackend(AttentionBackend):
    @classmethod
    def is_mla(cls):
        return True

    @classmethod
    def supports_compute_capability(cls, capability):
        return capability.major in (9, 10)


class TritonMLABackend(AttentionBackend):
    @classmethod
    def is_mla(cls):
        return True
