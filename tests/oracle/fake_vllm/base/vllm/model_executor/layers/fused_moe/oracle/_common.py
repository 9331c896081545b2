import enum

from vllm.model_executor.layers.fused_moe import modular_kernel as mk


class Backend(enum.Enum):
    TRITON = "TRITON"
    CUTLASS = "VLLM_CUTLASS"
    MARLIN = "MARLIN"
    DEEP_GEMM = "DEEPGEMM"


_MAP = {
    "triton": Backend.TRITON,
    "cutlass": Backend.CUTLASS,
    "marlin": Backend.MARLIN,
    "deep_gemm": Backend.DEEP_GEMM,
}
_KERNELS = {
    Backend.TRITON: [mk.TritonExperts],
    Backend.CUTLASS: [mk.CutlassExperts],
    Backend.MARLIN: [mk.MarlinExperts],
    Backend.DEEP_GEMM: [mk.DeepGemmExperts],
}


def backend_to_kernel_cls(backend):
    return _KERNELS[backend]


def map_backend(runner_backend, what, allowed):
    if runner_backend in _MAP and _MAP[runner_backend] in allowed:
        return _MAP[runner_backend]
    raise ValueError(f"moe_backend='{runner_backend}' is not supported for {what} MoE.")


def select(config, weight_key, activation_key, what, order):
    def _return_or_raise(backend):
        reason = None
        for k_cls in backend_to_kernel_cls(backend):
            ok, reason = k_cls.is_supported_config(k_cls, config, weight_key, activation_key)
            if ok:
                return backend, k_cls
        raise ValueError(
            f"{what} MoE backend '{backend.value}' does not support the "
            f"deployment configuration since {reason}."
        )

    if config.moe_backend != "auto":
        return _return_or_raise(map_backend(config.moe_backend, what, order))
    for backend in order:
        for k_cls in backend_to_kernel_cls(backend):
            if k_cls.is_supported_config(k_cls, config, weight_key, activation_key)[0]:
                return backend, k_cls
    raise NotImplementedError(f"No {what} MoE backend supports the deployment configuration.")
