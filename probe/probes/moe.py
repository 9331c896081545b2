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
from dataclasses import dataclass, field
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


def _preflight(p: MoeParams) -> str | None:
    """Why this cell cannot be a valid probe of its backend (a ``skipped`` reason), before any import."""
    if p.quant not in QUANT_CONFIGS:
        raise ValueError(f"unknown quant scheme {p.quant!r}; known: {', '.join(QUANTS)}")
    if p.top_k > p.experts:
        return f"top_k={p.top_k} > experts={p.experts}"
    return shape_skip_reason(p.quant, p.hidden, p.intermediate)


@dataclass
class _LayerRun:
    """What one MoE cell accumulates while it builds, fills, checks and times its layer."""

    p: MoeParams
    torch: Any
    cfg: Any
    details: dict[str, Any]
    degraded: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    lock_wait: float = 0.0
    qcfg: Any = None
    factory: Any = None
    layer: Any = None
    method: Any = None

    def outcome(self, outcome: str, cause: str | None, ref_error: float | None = None) -> dict[str, Any]:
        return result(
            outcome,
            cause,
            timings=self.timings,
            ref_error=ref_error,
            details=self.details,
            degraded=self.degraded,
        )


def _start(p: MoeParams, torch: Any, vllm_compat: Any) -> _LayerRun:
    """The quant config, the layer factory and the vLLM config of a layer-only probe (``--moe-backend``
    set), and the details it starts with."""
    from vllm.config import KernelConfig, VllmConfig

    _ensure_runtime(torch)
    qname, qdict, _activation = QUANT_CONFIGS[p.quant]
    qcfg = vllm_compat.quant_config_class(qname).from_config(dict(qdict or {})) if qname else None
    factory = vllm_compat.fused_moe_factory()
    cfg = VllmConfig(kernel_config=KernelConfig(moe_backend=p.backend))
    run = _LayerRun(
        p,
        torch,
        cfg,
        details={
            "vllm": vllm_compat.runtime_version(),
            "activation": QUANT_CONFIGS[p.quant][2],
            "reference": "float32 torch MoE over probe-dequantized checkpoint weights",
            "metric": "relative L2 error",
        },
        qcfg=qcfg,
        factory=factory,
    )
    if p.quant == "mxfp4" and cfg.model_config is None:
        # the MXFP4 oracle reads model_config.quantization_config (a user override); no model here
        object.__setattr__(cfg, "model_config", _NoModelConfig())
        run.degraded.append(
            "MXFP4: VllmConfig.model_config stubbed (quantization_config=None, no user override)"
        )
    return run


def _build(run: _LayerRun, vllm_compat: Any, ctx: ProbeContext) -> dict[str, Any] | None:
    """Build the layer through vLLM's factory (its oracle picks or refuses the backend here); a clean
    refusal is the cell's answer (``unsupported``), else None."""
    p, torch = run.p, run.torch
    ctx.phase("build")
    t0 = time.perf_counter()
    try:
        with torch.device("cuda"):
            run.layer = run.factory(
                num_experts=p.experts,
                top_k=p.top_k,
                hidden_size=p.hidden,
                intermediate_size=p.intermediate,
                params_dtype=torch.bfloat16,
                renormalize=True,
                quant_config=run.qcfg,
                tp_size=1,
                dp_size=1,
                prefix=f"probe.moe.{p.backend}.{p.quant}.{p.experts}",
                activation=QUANT_CONFIGS[p.quant][2],
                has_bias=(p.quant == "mxfp4"),
            )
    except (ValueError, NotImplementedError) as exc:
        if vllm_compat.is_refusal(exc):
            return unsupported(f"{type(exc).__name__}: {exc}", details=run.details)
        raise
    run.timings["build_s"] = time.perf_counter() - t0
    run.method = run.layer._quant_method
    run.details.update(selected_moe_backend(run.method))
    ctx.note("selected", run.details.get("selected_backend"))
    return None


def _load_weights(run: _LayerRun, ctx: ProbeContext) -> tuple[Any, Any]:
    """Fill the layer with checkpoint-format tensors quantized from known weights, then let the backend
    repack them; returns the dequantized reference weights (w13, w2)."""
    p, torch = run.p, run.torch
    e, h, inter = p.experts, p.hidden, p.intermediate
    # pure GPU work, short: may overlap other cells' set-up, never another cell's timed loop
    with gpulock.gpu_shared() as waited:
        run.lock_wait += waited
        ctx.phase("weights")
        f32 = torch.float32
        w13 = (torch.randn(e, 2 * inter, h, device="cuda", dtype=f32) / (h**0.5)).to(torch.bfloat16)
        w2 = (torch.randn(e, h, inter, device="cuda", dtype=f32) / (inter**0.5)).to(torch.bfloat16)
        tensors, r13, r2 = quantize_experts(p.quant, w13, w2, torch)
        del w13, w2
        notes = fill_parameters(run.layer.routed_experts, tensors, torch)
        del tensors
        run.details["params"] = notes
        if notes["padded"]:
            run.degraded.append("layer padded hidden/intermediate: " + "; ".join(notes["padded"]))
    # unlocked: repacking may JIT-compile (DeepGEMM) for many seconds of CPU time
    ctx.phase("process_weights")
    t0 = time.perf_counter()
    run.method.process_weights_after_loading(run.layer.routed_experts)
    torch.cuda.synchronize()
    run.timings["process_weights_s"] = time.perf_counter() - t0
    run.details.update(selected_moe_backend(run.method))
    return r13, r2


def _check_and_time(run: _LayerRun, refs: tuple[Any, Any], ctx: ProbeContext) -> float | dict[str, Any]:
    """Forward at each batch size against the float32 reference, then time it (GPU to itself); the
    worst relative error, or the cell's ``wrong_output`` answer."""
    from vllm.forward_context import set_forward_context

    from probe.probes import quant_ref

    p, torch = run.p, run.torch
    activation = QUANT_CONFIGS[p.quant][2]
    ctx.phase("forward")
    errors: dict[str, float | None] = {}
    worst = 0.0
    for m in (int(b) for b in p.batch_sizes):
        x = torch.randn(m, p.hidden, device="cuda", dtype=torch.bfloat16)
        logits = quant_ref.make_router_logits(m, p.experts, p.top_k, p.effective_seed + m, device="cuda")

        def fwd(x: Any = x, logits: Any = logits, m: int = m, lay: Any = run.layer) -> Any:
            dp = torch.tensor([m], dtype=torch.int, device="cuda")
            with set_forward_context(None, run.cfg, num_tokens=m, num_tokens_across_dp=dp):
                return lay(x, logits)

        y = fwd()  # the first call may JIT-compile (Triton, Marlin, DeepGEMM): unlocked, CPU-bound
        torch.cuda.synchronize()
        with gpulock.gpu_shared() as waited:
            run.lock_wait += waited
            ctx.phase("reference")
            ref = quant_ref.torch_moe(x, logits, refs[0], refs[1], p.top_k, True, activation)
            err, problem = quant_ref.check_output(y, ref)
        if problem:
            return run.outcome("wrong_output", f"batch {m}: {problem}")
        errors[f"b{m}"] = err
        worst = max(worst, err or 0.0)
        ctx.phase("forward")
        with gpulock.gpu_exclusive() as waited:  # -j N: no other cell's kernels while timing
            run.lock_wait += waited
            run.timings[f"forward_ms_b{m}"] = _time_ms(fwd, torch, p.effective_warmup, p.effective_iters)
    run.details["errors"] = errors
    return worst


def run(params: dict[str, Any], ctx: ProbeContext) -> dict[str, Any]:
    p = MoeParams.from_wire(params)
    reason = _preflight(p)
    if reason:
        return skipped(reason)
    ctx.phase("import")
    import torch

    if not torch.cuda.is_available():
        return skipped("no CUDA device visible to torch")
    from probe.probes import quant_ref, vllm_compat

    reason = vllm_compat.moe_backend_skip_reason(p.backend)
    if reason:
        return skipped(reason)
    from vllm.config import set_current_vllm_config

    state = _start(p, torch, vllm_compat)
    torch.manual_seed(p.effective_seed)
    with set_current_vllm_config(state.cfg):
        refused = _build(state, vllm_compat, ctx)
        if refused is not None:
            return refused
        refs = _load_weights(state, ctx)
        worst = _check_and_time(state, refs, ctx)
        del refs
        if os.environ.get(gpulock.ENV_VAR):
            state.details["gpu_lock_wait_s"] = round(state.lock_wait, 3)
        state.details["tolerance"] = quant_ref.TOLERANCE[p.quant]
    if isinstance(worst, dict):
        return worst
    tolerance = quant_ref.TOLERANCE[p.quant]
    if worst > tolerance:
        errors = state.details.get("errors")
        cause = f"relative L2 error {worst:.3g} > tolerance {tolerance} for {p.quant} (per batch: {errors})"
        return state.outcome("wrong_output", cause, ref_error=worst)
    return state.outcome("ok", None, ref_error=worst)
