"""The quant formats probe knows, and the checkpoint ``quantization_config`` each one carries.

The one list of quant names: model profiles, the recommender, the CLI's ``--quant`` choices and the
MoE probe all import :data:`QUANTS` / :data:`Quant` from here.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from probe.errors import UsageError

Quant = Literal["bf16", "fp8", "fp8_block", "nvfp4", "int4_w4a16", "mxfp4"]
QUANTS: tuple[str, ...] = get_args(Quant)

# vLLM quantization method name per quant scheme: the name ``get_quantization_config(name)`` takes for a
# checkpoint whose config.json carries :func:`quantization_config` (``None``: unquantized). The
# ``gptq`` / ``modelopt`` checkpoints are loaded by vLLM's ``gptq_marlin`` / ``modelopt_fp4`` classes.
VLLM_QUANT_METHOD: dict[str, str | None] = {
    "bf16": None,
    "fp8": "fp8",
    "fp8_block": "fp8",
    "nvfp4": "modelopt_fp4",
    "int4_w4a16": "gptq_marlin",
    "mxfp4": "mxfp4",
}

_CONFIGS: dict[str, dict[str, Any]] = {
    "fp8": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    "fp8_block": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": [128, 128],
    },
    "mxfp4": {"quant_method": "mxfp4"},
    "int4_w4a16": {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "desc_act": False,
        "sym": True,
        "lm_head": False,
    },
}


def quantization_config(quant: str, exclude_modules: list[str] | None = None) -> dict[str, Any] | None:
    """The config.json ``quantization_config`` a checkpoint in ``quant`` carries (``None`` for bf16).

    The single source for these dicts: the engine probe writes them into synthetic config.json files
    and the MoE probe passes them to vLLM's ``QuantizationConfig.from_config``. ``exclude_modules``
    (NVFP4 / ModelOpt only) lists the modules left in bf16.
    """
    if quant == "bf16":
        return None
    if quant == "nvfp4":
        return {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "group_size": 16,
            "kv_cache_quant_algo": None,
            "exclude_modules": list(exclude_modules or []),
        }
    if quant in _CONFIGS:
        cfg = dict(_CONFIGS[quant])
        if "weight_block_size" in cfg:
            cfg["weight_block_size"] = list(cfg["weight_block_size"])
        return cfg
    raise UsageError(f"unknown quant {quant!r}; known: {', '.join(QUANTS)}")


#: OCP microscaling (MXFP4): one E8M0 scale per 32 elements along K (not in the checkpoint's config)
MX_BLOCK = 32


def shape_skip_reason(quant: str, hidden: int, intermediate: int) -> str | None:
    """Why no checkpoint in ``quant`` can have this MoE shape (vLLM's layer would refuse it), or None.

    The granularity comes from :func:`quantization_config` (``group_size``, ``weight_block_size``): both
    the hidden and the (per-shard) intermediate width are a GEMM's K or N, so both must be multiples.
    """
    cfg = quantization_config(quant) or {}
    if quant == "mxfp4":
        m, unit = MX_BLOCK, f"groups of {MX_BLOCK} along K"
    elif "weight_block_size" in cfg:
        n, k = cfg["weight_block_size"]
        m, unit = max(n, k), f"{n}x{k} weight blocks"
    elif "group_size" in cfg:
        m = int(cfg["group_size"])
        unit = f"groups of {m} along K"
    else:
        return None
    if hidden % m == 0 and intermediate % m == 0:
        return None
    return (
        f"{quant} checkpoints quantize in {unit}: hidden {hidden} and intermediate {intermediate} "
        f"must both be multiples of {m}"
    )
