import functools

from vllm.platforms import current_platform


@functools.cache
def is_deep_gemm_supported():
    """As vLLM's: a capability probe cached for the life of the process (the first GPU asked sticks)."""
    cap = current_platform.get_device_capability()
    return cap is not None and cap.to_int() in (90, 100, 103)
