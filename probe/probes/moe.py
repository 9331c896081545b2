"""MoE probe: one MoE layer through vLLM's own code path, checked against a torch reference.

quant config (vLLM's ``get_quantization_config(name).from_config(...)``, as a checkpoint's
``quantization_config`` would give) -> FusedMoE layer under ``KernelConfig(moe_backend=X)`` (the oracle
picks / refuses the backend here) -> the layer's own parameters filled with checkpoint-format tensors
quantized from known bf16 weights (:mod:`probe.probes.quant_ref`) -> ``process_weights_after_loading``
(backend repack / shuffle / swizzle) -> forward at batch 1 and 64, compared with a float32 torch
reference computed from our own dequantization of the same checkpoint tensors -> timed with CUDA
events (median after warm-up).

Params: backend, quant, experts, hidden, intermediate (per TP shard), top_k, tp, model,
batch_sizes (default [1, 64]), seed, iters, warmup.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from probe.catalog.models import QUANTS as CATALOG_QUANTS
from probe.catalog.models import VLLM_QUANT_METHOD, quantization_config
from probe.catalog.quants import shape_skip_reason
from probe.cell_params import MoeParams
from probe.cells import ProbeContext
from probe.probes.common import result, skipped, unsupported
from probe.probes.introspect import selected_moe_backend
from probe.probes.runtime import ensure_runtime as _ensure_runtime
from probe.probes.runtime import time_ms as _time_ms
from probe.sandbox import gpulock

log = logging.getLogger(__name__)

# quant scheme -> (vLLM quantization method name, config.json quantization_config, activation).
# The dicts come from the catalog (the one source shared with the engine probe's synthetic configs);
# MXFP4 checkpoints (gpt-oss) use the clamped SwiGLU activation.
QUANT_CONFIGS: dict[str, tuple[str | None, dict[str, Any] | None, str]] = {
    q: (VLLM_QUANT_METHOD[q], quantization_config(q), "swigluoai" if q == "mxfp4" else "silu")
    for q in CATALOG_QUANTS
}

QUANTS: tuple[str, ...] = tuple(QUANT_CONFIGS)  # the same names as probe.catalog.models.QUANTS


class _NoModelConfig:
    """Stand-in for ModelConfig in a layer-only probe (no model): the attributes MoE code reads.

    vLLM 0.26's MXFP4 oracle reads ``model_config.quantization_config`` (a user override) without a
    None check; once a model_config exists, FusedMoE reads ``dtype`` and the all2all setup reads
    ``enforce_eager``. Anything else raises AttributeError (and shows up as a probe-side failure).
    """

    quantization_config = None
    enforce_eager = True
    hf_text_config = None

    def __init__(self) -> None:
        import torch

        self.dtype = torch.bfloat16


def estimate_mem_gib(experts: int, hidden: int, intermediate: int) -> float:
    """GPU memory a MoE cell may peak at, W = experts x 3 x hidden x intermediate weights: the layer's
    parameters (<= 2W bytes), the bf16 source weights (2W), per-chunk checkpoint tensors and bf16
    references (<= 4W) and their concatenated copies (<= 4W) -> 12W, plus 2 GiB of context/scratch.
    (H200, vLLM 0.26, E=512 x 3072 x 1024: 6W underestimated it and four such cells at -j 4 went OOM;
    the measured peaks are in each result's ``details.gpu_peak_gib``.)"""
    weights = experts * 3 * hidden * intermediate
    return round(weights * 12 / 2**30 + 2.0, 1)


def quantize_experts(
    quant: str, w13: Any, w2: Any, torch: Any, chunk: int = 16
) -> tuple[dict[str, Any], Any, Any]:
    """bf16 weights -> (checkpoint tensors by vLLM parameter name, dequantized w13, w2 in bf16).

    Works on ``chunk`` experts at a time (the E2M1 rounding needs ~8x the weights' size in scratch)
    and concatenates along the expert dimension.
    """
    parts = [
        _quantize_chunk(quant, w13[i : i + chunk], w2[i : i + chunk], torch)
        for i in range(0, w13.shape[0], chunk)
    ]
    tensors = {k: torch.cat([p[0][k] for p in parts]) for k in parts[0][0]}
    return tensors, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])


def _quantize_chunk(quant: str, w13: Any, w2: Any, torch: Any) -> tuple[dict[str, Any], Any, Any]:
    t, r13, r2 = _quantize_chunk_f32(quant, w13, w2, torch)
    return t, r13.to(torch.bfloat16), r2.to(torch.bfloat16)


def _quantize_chunk_f32(quant: str, w13: Any, w2: Any, torch: Any) -> tuple[dict[str, Any], Any, Any]:
    from probe.probes import quant_ref as q

    e = w13.shape[0]
    ones = lambda *s: torch.ones(*s, dtype=torch.float32, device=w13.device)  # noqa: E731
    if quant == "bf16":
        return {"w13_weight": w13, "w2_weight": w2}, w13.float(), w2.float()
    if quant == "fp8":
        inter = w13.shape[1] // 2
        g_q, g_s = q.quant_fp8_per_tensor(w13[:, :inter])
        u_q, u_s = q.quant_fp8_per_tensor(w13[:, inter:])
        d_q, d_s = q.quant_fp8_per_tensor(w2)
        t = {
            "w13_weight": torch.cat([g_q, u_q], 1),
            "w13_weight_scale": torch.stack([g_s, u_s], 1),
            "w2_weight": d_q,
            "w2_weight_scale": d_s,
        }
        r13 = torch.cat([g_q.float() * g_s[:, None, None], u_q.float() * u_s[:, None, None]], 1)
        return t, r13, d_q.float() * d_s[:, None, None]
    if quant == "fp8_block":
        a_q, a_s = q.quant_fp8_block(w13)
        d_q, d_s = q.quant_fp8_block(w2)
        t = {
            "w13_weight": a_q,
            "w13_weight_scale_inv": a_s,
            "w2_weight": d_q,
            "w2_weight_scale_inv": d_s,
            "w13_weight_scale": a_s,
            "w2_weight_scale": d_s,
        }
        return t, q.dequant_fp8_block(a_q, a_s), q.dequant_fp8_block(d_q, d_s)
    if quant == "nvfp4":
        a_p, a_bs, a_g = q.quant_nvfp4(w13)  # one global scale per expert for gate+up (as ModelOpt)
        d_p, d_bs, d_g = q.quant_nvfp4(w2)
        t = {
            "w13_weight": a_p,
            "w13_weight_scale": a_bs,
            "w13_weight_scale_2": (1.0 / a_g)[:, None].expand(e, 2).contiguous(),
            "w13_input_scale": ones(e, 2),
            "w2_weight": d_p,
            "w2_weight_scale": d_bs,
            "w2_weight_scale_2": 1.0 / d_g,
            "w2_input_scale": ones(e),
        }
        return t, q.dequant_nvfp4(a_p, a_bs, a_g), q.dequant_nvfp4(d_p, d_bs, d_g)
    if quant == "int4_w4a16":
        a_p, a_s, a_q = q.quant_gptq_int4(w13)
        d_p, d_s, d_q = q.quant_gptq_int4(w2)
        h, inter = w13.shape[2], w2.shape[2]
        ar = lambda n: torch.arange(n, dtype=torch.int32, device=w13.device).expand(e, n).contiguous()  # noqa: E731
        t = {
            "w13_qweight": a_p,
            "w13_scales": a_s,
            "w2_qweight": d_p,
            "w2_scales": d_s,
            "w13_g_idx": ar(h) // 128,
            "w2_g_idx": ar(inter) // 128,
            "w13_g_idx_sort_indices": ar(h),
            "w2_g_idx_sort_indices": ar(inter),
        }
        return t, q.dequant_gptq_int4(a_q, a_s), q.dequant_gptq_int4(d_q, d_s)
    if quant == "mxfp4":
        a_p, a_s = q.quant_mxfp4(w13)
        d_p, d_s = q.quant_mxfp4(w2)
        t = {"w13_weight": a_p, "w13_weight_scale": a_s, "w2_weight": d_p, "w2_weight_scale": d_s}
        return t, q.dequant_mxfp4(a_p, a_s), q.dequant_mxfp4(d_p, d_s)
    raise ValueError(f"unknown quant scheme {quant!r}; known: {', '.join(QUANTS)}")


def fill_parameters(module: Any, tensors: dict[str, Any], torch: Any) -> dict[str, Any]:
    """Copy checkpoint tensors into the layer's own parameters (vLLM created names/shapes/dtypes)."""
    notes: dict[str, Any] = {"filled": [], "zeroed": [], "padded": []}
    for name, p in module.named_parameters(recurse=False):
        src = tensors.get(name)
        if src is None:
            with torch.no_grad():
                if name.endswith("input_scale"):
                    p.data.fill_(1.0)
                else:
                    p.data.zero_()
            notes["zeroed"].append(name)
            continue
        src = src.to(device=p.device)
        if src.dtype != p.dtype:
            src = (
                src.to(p.dtype)
                if p.dtype.is_floating_point or not src.dtype.is_floating_point
                else src.view(p.dtype)
            )
        if tuple(src.shape) == tuple(p.shape):
            p.data.copy_(src)
        elif src.dim() == p.dim() and all(s <= d for s, d in zip(src.shape, p.shape, strict=True)):
            p.data.zero_()
            p.data[tuple(slice(0, s) for s in src.shape)].copy_(src)
            notes["padded"].append(f"{name}: {list(src.shape)} -> {list(p.shape)}")
        elif src.numel() == p.numel():
            p.data.copy_(src.reshape(p.shape))
        else:
            raise RuntimeError(
                f"probe cannot map checkpoint tensor {name} {list(src.shape)} "
                f"onto vLLM parameter {list(p.shape)} {p.dtype}"
            )
        notes["filled"].append(name)
    return notes


def run(params: dict[str, Any], ctx: ProbeContext) -> dict[str, Any]:
    p = MoeParams.from_wire(params)
    backend, quant, e, h, inter, top_k = p.backend, p.quant, p.experts, p.hidden, p.intermediate, p.top_k
    batch_sizes = [int(b) for b in p.batch_sizes]
    seed, iters, warmup = p.effective_seed, p.effective_iters, p.effective_warmup
    if quant not in QUANT_CONFIGS:
        raise ValueError(f"unknown quant scheme {quant!r}; known: {', '.join(QUANTS)}")
    if top_k > e:
        return skipped(f"top_k={top_k} > experts={e}")
    shape_reason = shape_skip_reason(quant, h, inter)
    if shape_reason:
        return skipped(shape_reason)

    ctx.phase("import")
    import torch

    if not torch.cuda.is_available():
        return skipped("no CUDA device visible to torch")
    from probe.probes import quant_ref, vllm_compat

    reason = vllm_compat.moe_backend_skip_reason(backend)
    if reason:
        return skipped(reason)
    from vllm.config import KernelConfig, VllmConfig, set_current_vllm_config
    from vllm.forward_context import set_forward_context

    _ensure_runtime(torch)
    qname, qdict, activation = QUANT_CONFIGS[quant]
    qcfg = vllm_compat.quant_config_class(qname).from_config(dict(qdict or {})) if qname else None
    factory = vllm_compat.fused_moe_factory()
    cfg = VllmConfig(kernel_config=KernelConfig(moe_backend=backend))
    degraded: list[str] = []
    if quant == "mxfp4" and cfg.model_config is None:
        # the MXFP4 oracle reads model_config.quantization_config (a user override); no model here
        object.__setattr__(cfg, "model_config", _NoModelConfig())
        degraded.append("MXFP4: VllmConfig.model_config stubbed (quantization_config=None, no user override)")
    details: dict[str, Any] = {
        "vllm": vllm_compat.runtime_version(),
        "activation": activation,
        "reference": "float32 torch MoE over probe-dequantized checkpoint weights",
        "metric": "relative L2 error",
    }
    timings: dict[str, float] = {}
    torch.manual_seed(seed)
    lock_wait = 0.0
    with set_current_vllm_config(cfg):
        ctx.phase("build")
        t0 = time.perf_counter()
        try:
            with torch.device("cuda"):
                layer = factory(
                    num_experts=e,
                    top_k=top_k,
                    hidden_size=h,
                    intermediate_size=inter,
                    params_dtype=torch.bfloat16,
                    renormalize=True,
                    quant_config=qcfg,
                    tp_size=1,
                    dp_size=1,
                    prefix=f"probe.moe.{backend}.{quant}.{e}",
                    activation=activation,
                    has_bias=(quant == "mxfp4"),
                )
        except (ValueError, NotImplementedError) as exc:
            if vllm_compat.is_refusal(exc):
                return unsupported(f"{type(exc).__name__}: {exc}", details=details)
            raise
        timings["build_s"] = time.perf_counter() - t0
        method = layer._quant_method
        details.update(selected_moe_backend(method))
        ctx.note("selected", details.get("selected_backend"))

        # pure GPU work, short: may overlap other cells' set-up, never another cell's timed loop
        with gpulock.gpu_shared() as waited:
            lock_wait += waited
            ctx.phase("weights")
            f32 = torch.float32
            w13 = (torch.randn(e, 2 * inter, h, device="cuda", dtype=f32) / (h**0.5)).to(torch.bfloat16)
            w2 = (torch.randn(e, h, inter, device="cuda", dtype=f32) / (inter**0.5)).to(torch.bfloat16)
            tensors, r13, r2 = quantize_experts(quant, w13, w2, torch)
            del w13, w2
            notes = fill_parameters(layer.routed_experts, tensors, torch)
            del tensors
            details["params"] = notes
            if notes["padded"]:
                degraded.append("layer padded hidden/intermediate: " + "; ".join(notes["padded"]))

        # unlocked: repacking may JIT-compile (DeepGEMM) for many seconds of CPU time
        ctx.phase("process_weights")
        t0 = time.perf_counter()
        method.process_weights_after_loading(layer.routed_experts)
        torch.cuda.synchronize()
        timings["process_weights_s"] = time.perf_counter() - t0
        details.update(selected_moe_backend(method))

        ctx.phase("forward")
        errors: dict[str, float | None] = {}
        worst: float | None = 0.0
        for m in batch_sizes:
            x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
            logits = quant_ref.make_router_logits(m, e, top_k, seed + m, device="cuda")

            def fwd(x: Any = x, logits: Any = logits, m: int = m, lay: Any = layer) -> Any:
                dp = torch.tensor([m], dtype=torch.int, device="cuda")
                with set_forward_context(None, cfg, num_tokens=m, num_tokens_across_dp=dp):
                    return lay(x, logits)

            y = fwd()  # the first call may JIT-compile (Triton, Marlin, DeepGEMM): unlocked, CPU-bound
            torch.cuda.synchronize()
            with gpulock.gpu_shared() as waited:
                lock_wait += waited
                ctx.phase("reference")
                ref = quant_ref.torch_moe(x, logits, r13, r2, top_k, True, activation)
                err, problem = quant_ref.check_output(y, ref)
            if problem:
                return result(
                    "wrong_output",
                    f"batch {m}: {problem}",
                    timings=timings,
                    details=details,
                    degraded=degraded,
                )
            errors[f"b{m}"] = err
            worst = max(worst or 0.0, err or 0.0)
            ctx.phase("forward")
            with gpulock.gpu_exclusive() as waited:  # -j N: no other cell's kernels while timing
                lock_wait += waited
                timings[f"forward_ms_b{m}"] = _time_ms(fwd, torch, warmup, iters)
        details["errors"] = errors
        if os.environ.get(gpulock.ENV_VAR):
            details["gpu_lock_wait_s"] = round(lock_wait, 3)
        details["tolerance"] = quant_ref.TOLERANCE[quant]
    del r13, r2
    if worst is not None and worst > quant_ref.TOLERANCE[quant]:
        return result(
            "wrong_output",
            f"relative L2 error {worst:.3g} > tolerance {quant_ref.TOLERANCE[quant]} "
            f"for {quant} (per batch: {errors})",
            timings=timings,
            ref_error=worst,
            details=details,
            degraded=degraded,
        )
    return result("ok", None, timings=timings, ref_error=worst, details=details, degraded=degraded)
