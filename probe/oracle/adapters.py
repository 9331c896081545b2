"""Per-vLLM-version access to vLLM's own backend-selection code (data only; stdlib only).

This module is imported twice: by the parent (``probe predict``, to say which versions it can
evaluate) and by the sandboxed child (``child.py``, loaded by file path inside the image's Python,
where ``probe`` itself may not be installed) — so it must not import anything outside the
standard library.

An adapter names, for one vLLM release line, where the selection code lives:

* ``attention``: the selector config (``AttentionSelectorConfig``), the CUDA platform class whose
  ``get_attn_backend_cls`` / ``get_valid_backends`` run every backend's ``validate_configuration``,
  the priority function (``_get_backend_priorities``: what ``auto`` tries, per capability),
  ``DeviceCapability``, the backend enum and the FlashAttention version resolver.
* ``moe``: ``FusedMoEConfig`` / ``FusedMoEParallelConfig`` / ``MoEActivation`` / routing helpers,
  the ``--moe-backend`` literal, and per quant format the oracle entry point that the quant
  method's ``__init__`` calls (``select_*_moe_backend``) with the weight / activation quant keys
  that caller passes (``cite`` = that caller, read from the release's source).

Both 0.26 and 0.33 share the layout below (read from ``vllm-0.26.0`` and ``vllm-0.33.0`` wheels);
the child passes only the keyword arguments a function's signature accepts, so the small signature
differences (e.g. ``select_wna16_moe_backend`` gained ``quant_config`` / ``may_have_zp`` after 0.26,
``AttentionSelectorConfig`` gained ``use_dcp`` / ``use_rswa``) need no code. A release line without
an entry gets ``skipped`` with :func:`skip_reason`.
"""

from __future__ import annotations

import re
from typing import Any

_FUSED = "vllm.model_executor.layers.fused_moe"
_QUTILS = "vllm.model_executor.layers.quantization.utils.quant_utils"

_ATTENTION: dict[str, str] = {
    "selector_config": "vllm.v1.attention.selector:AttentionSelectorConfig",
    "platform": "vllm.platforms.cuda:NonNvmlCudaPlatform",
    "priorities": "vllm.platforms.cuda:_get_backend_priorities",
    "capability": "vllm.platforms.interface:DeviceCapability",
    "backend_enum": "vllm.v1.attention.backends.registry:AttentionBackendEnum",
    "fa_version": "vllm.v1.attention.backends.fa_utils:get_flash_attn_version",
}

_MOE: dict[str, Any] = {
    "config": f"{_FUSED}.config:FusedMoEConfig",
    "parallel_config": f"{_FUSED}.config:FusedMoEParallelConfig",
    "routing_type": f"{_FUSED}.config:get_routing_method_type",
    "routing_enum": f"{_FUSED}.config:RoutingMethodType",
    "activation": f"{_FUSED}.activation:MoEActivation",
    "backend_literal": "vllm.config.kernel:MoEBackend",
    "quants": {
        "bf16": {
            "select": f"{_FUSED}.oracle.unquantized:select_unquantized_moe_backend",
            "map": f"{_FUSED}.oracle.unquantized:map_unquantized_backend",
            "kernels": f"{_FUSED}.oracle.unquantized:backend_to_kernel_cls",
            "cite": "unquantized_fused_moe_method.py UnquantizedFusedMoEMethod.__init__",
        },
        "fp8": {
            "select": f"{_FUSED}.oracle.fp8:select_fp8_moe_backend",
            "map": f"{_FUSED}.oracle.fp8:map_fp8_backend",
            "kernels": f"{_FUSED}.oracle.fp8:backend_to_kernel_cls",
            "weight_key": f"{_QUTILS}:kFp8StaticTensorSym",
            "activation_key": f"{_QUTILS}:kFp8DynamicTensorSym",
            "kwargs": {"allow_vllm_cutlass": False},
            "cite": "quantization/fp8.py Fp8MoEMethod.__init__ (activation_scheme=dynamic)",
        },
        "fp8_block": {
            "select": f"{_FUSED}.oracle.fp8:select_fp8_moe_backend",
            "map": f"{_FUSED}.oracle.fp8:map_fp8_backend",
            "kernels": f"{_FUSED}.oracle.fp8:backend_to_kernel_cls",
            "weight_key_block": [128, 128],
            "block_resolver": f"{_FUSED}.oracle.fp8:resolve_fp8_moe_weight_block_shape",
            "activation_key": f"{_QUTILS}:kFp8Dynamic128Sym",
            "kwargs": {"allow_vllm_cutlass": False},
            "cite": "quantization/fp8.py Fp8MoEMethod.__init__ (weight_block_size=[128, 128])",
        },
        "nvfp4": {
            "select": f"{_FUSED}.oracle.nvfp4:select_nvfp4_moe_backend",
            "map": f"{_FUSED}.oracle.nvfp4:map_nvfp4_backend",
            "kernels": f"{_FUSED}.oracle.nvfp4:backend_to_kernel_cls",
            "weight_key": f"{_QUTILS}:kNvfp4Static",
            "activation_key": f"{_QUTILS}:kNvfp4Dynamic",
            "cite": "quantization/modelopt.py ModelOptNvFp4FusedMoE.__init__",
        },
        "mxfp4": {
            "select": f"{_FUSED}.oracle.mxfp4:select_mxfp4_moe_backend",
            "map": f"{_FUSED}.oracle.mxfp4:map_mxfp4_backend",
            "kernels": f"{_FUSED}.oracle.mxfp4:backend_to_kernel_cls",
            "cite": "quantization/mxfp4.py Mxfp4MoEMethod.__init__",
        },
        "int4_w4a16": {
            "select": f"{_FUSED}.oracle.int_wna16:select_wna16_moe_backend",
            "map": f"{_FUSED}.oracle.int_wna16:map_wna16_backend",
            "kernels": f"{_FUSED}.oracle.int_wna16:backend_to_kernel_cls",
            "weight_key_gptq": {
                "scalar_type": "vllm.scalar_type:scalar_types.uint4b8",
                "scale": f"{_QUTILS}:kInt4StaticGroupScale",
                "quant_key": f"{_QUTILS}:QuantKey",
            },
            "quant_config_method": "gptq",
            "kwargs": {"may_have_zp": False, "may_have_bias": True, "allow_tile_padding": True},
            "cite": "quantization/auto_gptq.py AutoGPTQMoEMethod.__init__ (bits=4, sym=True)",
        },
    },
}

#: release line (major.minor) -> adapter; both read from the wheels' source (see module docstring).
ADAPTERS: dict[str, dict[str, Any]] = {
    "0.26": {"name": "vllm-0.26", "attention": _ATTENTION, "moe": _MOE},
    "0.33": {"name": "vllm-0.33", "attention": _ATTENTION, "moe": _MOE},
}


def release_line(version: str) -> str | None:
    """'0.33.0' / '0.33.1.dev3+g1234' / '0.26.0+cu130' -> '0.33' / '0.26'; garbage -> None."""
    m = re.match(r"^\s*(\d+)\.(\d+)", version or "")
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def adapter_for(version: str) -> dict[str, Any] | None:
    line = release_line(version)
    return ADAPTERS.get(line) if line else None


def skip_reason(version: str) -> str | None:
    """None when an adapter exists for ``version``, else why the oracle cannot evaluate it."""
    if adapter_for(version) is not None:
        return None
    known = ", ".join(f"{k}.x" for k in sorted(ADAPTERS))
    return f"no oracle adapter for vLLM {version or '(unknown version)'}; adapters exist for {known}"
