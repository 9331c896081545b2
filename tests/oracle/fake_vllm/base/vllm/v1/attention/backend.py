class AttentionBackend:
    supported_dtypes = ["torch.bfloat16", "torch.float16"]

    @classmethod
    def supports_head_size(cls, head_size):
        return True

    @classmethod
    def is_mla(cls):
        return False

    @classmethod
    def supports_sink(cls):
        return False

    @classmethod
    def supports_compute_capability(cls, capability):
        return True

    @classmethod
    def validate_configuration(
        cls,
        head_size,
        dtype,
        kv_cache_dtype,
        block_size,
        use_mla,
        has_sink,
        use_sparse,
        device_capability,
        attn_type="decoder",
        has_sliding_window=False,
        **kwargs,
    ):
        reasons = []
        if not cls.supports_head_size(head_size):
            reasons.append("head_size not supported")
        if dtype not in cls.supported_dtypes:
            reasons.append("dtype not supported")
        if use_mla != cls.is_mla():
            reasons.append("MLA not supported" if use_mla else "non-MLA not supported")
        if has_sink and not cls.supports_sink():
            reasons.append("attention sinks not supported")
        if not cls.supports_compute_capability(device_capability):
            reasons.append("compute capability not supported")
        return reasons
