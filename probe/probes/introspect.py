"""What a built vLLM layer actually chose, read from its objects (runs inside the child; no imports)."""

from __future__ import annotations

from typing import Any


def selected_moe_backend(method: Any) -> dict[str, Any]:
    """Which MoE kernel a vLLM quant method object chose (class names, backend enum names)."""
    out: dict[str, Any] = {"quant_method_class": type(method).__name__}
    for attr in (
        "unquantized_backend",
        "fp8_backend",
        "nvfp4_backend",
        "wna16_moe_backend",
        "wna16_backend",
        "mxfp4_backend",
        "int8_backend",
    ):
        val = getattr(method, attr, None)
        if val is not None:
            out["selected_backend"] = getattr(val, "name", str(val))
    for attr in ("experts_cls",):
        val = getattr(method, attr, None)
        if val is not None:
            out["experts_class"] = getattr(val, "__name__", str(val))
    kernel = getattr(method, "moe_kernel", None)
    if kernel is not None:
        fe = getattr(kernel, "fused_experts", None) or getattr(kernel, "experts", None)
        if fe is not None:
            out["kernel_experts_class"] = type(fe).__name__
    return out
