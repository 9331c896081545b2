from vllm.model_executor.layers.fused_moe.oracle._common import (
    Backend,
    backend_to_kernel_cls,
    map_backend,
    select,
)

__all__ = ["backend_to_kernel_cls"]
_ORDER = [Backend.CUTLASS, Backend.MARLIN]


def map_nvfp4_backend(runner_backend):
    return map_backend(runner_backend, "NvFp4", _ORDER)


def select_nvfp4_moe_backend(config, weight_key, activation_key):
    return select(config, weight_key, activation_key, "NvFp4", _ORDER)
