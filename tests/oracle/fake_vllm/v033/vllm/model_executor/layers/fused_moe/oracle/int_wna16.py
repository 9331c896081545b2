from vllm.model_executor.layers.fused_moe.oracle._common import (
    Backend,
    backend_to_kernel_cls,
    map_backend,
    select,
)

__all__ = ["backend_to_kernel_cls"]
_ORDER = [Backend.MARLIN]


def map_wna16_backend(runner_backend):
    return map_backend(runner_backend, "WNA16", _ORDER)


def select_wna16_moe_backend(
    config, weight_key, quant_config, may_have_zp, may_have_bias, allow_tile_padding=False
):
    assert quant_config.raw["quant_method"] == "gptq"
    return select(config, weight_key, None, "WNA16", _ORDER)
