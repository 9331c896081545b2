from vllm.model_executor.layers.fused_moe.oracle._common import (
    Backend,
    backend_to_kernel_cls,
    map_backend,
    select,
)

__all__ = ["backend_to_kernel_cls"]


def map_unquantized_backend(runner_backend):
    return map_backend(runner_backend, "Unquantized", [Backend.TRITON, Backend.DEEP_GEMM])


def select_unquantized_moe_backend(moe_config):
    return select(moe_config, None, None, "Unquantized", [Backend.TRITON, Backend.DEEP_GEMM])
