from vllm.platforms.interface import Platform
from vllm.v1.attention.backends.registry import AttentionBackendEnum


def _get_backend_priorities(
    use_mla, device_capability, num_heads=None, kv_cache_dtype=None, use_non_causal=False
):
    if use_mla:
        return [AttentionBackendEnum.FLASHMLA, AttentionBackendEnum.TRITON_MLA]
    if device_capability.major == 10:
        return [
            AttentionBackendEnum.FLASHINFER,
            AttentionBackendEnum.FLASH_ATTN,
            AttentionBackendEnum.TRITON_ATTN,
        ]
    return [
        AttentionBackendEnum.FLASH_ATTN,
        AttentionBackendEnum.FLASHINFER,
        AttentionBackendEnum.TRITON_ATTN,
    ]


class CudaPlatformBase(Platform):
    device_name = "cuda"

    def is_cuda(self):
        return True

    @classmethod
    def get_valid_backends(cls, device_capability, attn_selector_config, num_heads=None):
        valid, invalid = [], {}
        prios = _get_backend_priorities(
            attn_selector_config.use_mla, device_capability, num_heads, attn_selector_config.kv_cache_dtype
        )
        for priority, backend in enumerate(prios):
            try:
                reasons = backend.get_class().validate_configuration(
                    device_capability=device_capability, **attn_selector_config._asdict()
                )
            except (ImportError, OSError) as e:
                reasons = [f"{type(e).__name__}: {e}"]
            if reasons:
                invalid[backend] = (priority, reasons)
            else:
                valid.append((priority, backend))
        return valid, invalid

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        cap = cls.get_device_capability()
        if selected_backend is not None:
            try:
                reasons = selected_backend.get_class().validate_configuration(
                    device_capability=cap, **attn_selector_config._asdict()
                )
            except (ImportError, OSError) as e:
                raise ValueError(
                    f"Selected backend {selected_backend} is not valid for this "
                    f"configuration. Reason: [{type(e).__name__}: {e}]"
                ) from e
            if reasons:
                raise ValueError(
                    f"Selected backend {selected_backend} is not valid for this "
                    f"configuration. Reason: {reasons}"
                )
            return selected_backend.get_path()
        valid, invalid = cls.get_valid_backends(cap, attn_selector_config, num_heads)
        if not valid:
            raise ValueError(f"No valid attention backend found for {cls.device_name}. Reasons: {invalid}.")
        return min(valid)[1].get_path()


class NonNvmlCudaPlatform(CudaPlatformBase):
    @classmethod
    def get_device_capability(cls, device_id=0):
        raise RuntimeError("fake vllm: no GPU")
