"""Attention probe without an engine: vLLM's attention layer + its metadata builder, in a warm worker.

Per cell (backend x FA version x head layout): a ``VllmConfig`` from ``EngineArgs`` on a 1-layer
synthetic config.json (``attention_backend`` and ``attention_config.flash_attn_version`` as a user
would pass them) -> vLLM's own ``Attention`` layer under that config (the selector picks or refuses
the backend here; gpt-oss-style attention sinks are passed as the model passes them) -> a paged KV
cache in the backend's own shape and stride order -> the backend's metadata builder on a hand-built
``CommonAttentionMetadata`` (vLLM's tests/v1/attention do the same) -> a prefill batch of several
requests of different lengths, then decode steps, each writing K/V through the impl's own cache
update -> outputs compared with a float32 reference (causal, GQA, sinks, optional sliding window)
-> timed with CUDA events (median forward ms). No model, no scheduler, no engine process: a warm
cell takes seconds, not the 35-165 s of a 1-layer engine.

MLA models keep the engine attention cell (:func:`probe.probes.engine.run_attention`): driving
``MLAAttention`` needs its projections and a latent cache this probe does not build.

Params: backend, fa_version, num_heads, num_kv_heads, head_dim, model, sinks (bool), sliding_window,
prompt_lens, decode_steps, iters, warmup, seed.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from probe.cells import ProbeContext
from probe.probes.attention_paged import Batch, kv_cache_for, pick_block_size
from probe.probes.common import result, skipped, unsupported
from probe.probes.runtime import ensure_runtime as _ensure_runtime
from probe.probes.runtime import time_ms as _time_ms

LAYER = "model.layers.0.self_attn.attn"
DEFAULT_PROMPTS = (96, 17, 160, 33)  # several requests, crossing block boundaries
_IMPORT_FAILURE = ("cannot import name", "No module named", "partially initialized", "ImportError")


def tiny_config(num_heads: int, num_kv_heads: int, head_dim: int) -> dict[str, Any]:
    """A 1-layer dense decoder config.json at a head layout (only the attention shape matters)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": num_heads * head_dim,
        "intermediate_size": 1024,
        "num_hidden_layers": 1,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "vocab_size": 2048,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def fa_unavailable(fa: int) -> dict[str, Any] | None:
    """``unsupported`` when this vLLM says FA ``fa`` cannot run here; raises ImportError when the reason
    is a compiled module that does not import (the sandbox classifies that as ``import_error``)."""
    from probe.probes import vllm_compat

    why = vllm_compat.fa_versions_available().get(fa)
    if not why:
        return None
    if any(s in why for s in _IMPORT_FAILURE):
        raise ImportError(f"FlashAttention {fa} does not import here: {why}")
    return unsupported(f"FlashAttention {fa} unavailable here: {why}")


def _reset_backend_caches() -> None:
    """A warm worker runs many cells: forget the previous backend's KV layout and selector cache."""
    with contextlib.suppress(Exception):
        from vllm.v1.attention.backends import utils as bu

        bu.set_kv_cache_layout(None)
        bu.get_kv_cache_layout.cache_clear()
    with contextlib.suppress(Exception):
        from vllm.v1.attention import selector

        selector._cached_get_attn_backend.cache_clear()


@contextlib.contextmanager
def _default_dtype(torch: Any, dtype: Any) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def vllm_config(params: dict[str, Any], max_len: int) -> Any:
    """The VllmConfig a user's flags would give (``EngineArgs`` validates them as ``vllm serve`` does)."""
    from vllm.engine.arg_utils import EngineArgs

    d = tempfile.mkdtemp(prefix="probe_attn_")
    cfg = tiny_config(int(params["num_heads"]), int(params["num_kv_heads"]), int(params["head_dim"]))
    (Path(d) / "config.json").write_text(json.dumps(cfg))
    kw: dict[str, Any] = {
        "model": d,
        "skip_tokenizer_init": True,
        "enforce_eager": True,
        "max_model_len": max_len,
        "dtype": "bfloat16",
        "load_format": "dummy",
        "enable_prefix_caching": False,
        "seed": 0,
        "attention_backend": str(params["backend"]),
    }
    if params.get("fa_version"):
        kw["attention_config"] = {"flash_attn_version": int(params["fa_version"])}
    return EngineArgs(**kw).create_engine_config()


def build_layer(params: dict[str, Any], cfg: Any, torch: Any) -> Any:
    """vLLM's Attention layer under ``cfg`` (registered in its static forward context as LAYER)."""
    from vllm.model_executor.layers.attention import Attention

    h, kv, d = int(params["num_heads"]), int(params["num_kv_heads"]), int(params["head_dim"])
    extra: dict[str, Any] = {}
    if params.get("sinks"):
        gen = torch.Generator(device="cpu").manual_seed(int(params.get("seed", 0)) + 7)
        extra["sinks"] = torch.randn(h, generator=gen).to(device="cuda", dtype=torch.bfloat16)
    # as a model loader builds it: default dtype bf16, buffers (_k_scale ...) on the GPU, then the
    # post-load hook (FlashInfer converts the sinks to float32 there)
    with _default_dtype(torch, torch.bfloat16), torch.device("cuda"):
        layer = Attention(
            h,
            d,
            d**-0.5,
            num_kv_heads=kv,
            cache_config=cfg.cache_config,
            per_layer_sliding_window=params.get("sliding_window"),
            prefix=LAYER,
            **extra,
        )
    if hasattr(layer, "process_weights_after_loading"):
        layer.process_weights_after_loading(torch.bfloat16)
    layer._probe_sinks = extra.get("sinks")  # what the reference uses (the impl may convert its copy)
    return layer


class _Run:
    """One cell's layer, cache, builder and the float32 history of every request's K/V."""

    def __init__(self, layer: Any, cfg: Any, batch: Batch, torch: Any) -> None:
        self.layer, self.cfg, self.batch, self.torch = layer, cfg, batch, torch
        be = layer.attn_backend
        spec = layer.get_kv_cache_spec(cfg)
        self.builder = be.get_builder_cls()(spec, [LAYER], cfg, torch.device("cuda:0"))
        self.kv_cache = kv_cache_for(layer, batch.num_blocks, batch.block_size, torch)
        self.writes_in_forward = bool(getattr(be, "forward_includes_kv_cache_update", False))
        from vllm.v1.attention.backend import CommonAttentionMetadata

        self.common_cls = CommonAttentionMetadata
        n = len(batch.seq_lens)
        self.k_hist: list[list[Any]] = [[] for _ in range(n)]
        self.v_hist: list[list[Any]] = [[] for _ in range(n)]

    def step(self, query_lens: list[int], gen: Any) -> tuple[Any, Any, Any]:
        """One batch step: (output, inputs by request, forward closure for timing)."""
        torch, layer = self.torch, self.layer
        h, kv, d = layer.num_heads, layer.num_kv_heads, layer.head_size
        n_tok = sum(query_lens)
        q, k, v = (
            torch.randn(n_tok, heads, d, generator=gen, dtype=torch.float32).to("cuda", torch.bfloat16)
            for heads in (h, kv, kv)
        )
        common, slots = self.batch.step(query_lens, self.common_cls)
        meta = self.builder.build(common_prefix_len=0, common_attn_metadata=common)
        impl = layer.impl
        if not self.writes_in_forward:
            impl.do_kv_cache_update(layer, k, v, self.kv_cache, slots)
        out = torch.empty_like(q)

        def fwd() -> Any:
            return impl.forward(layer, q, k, v, self.kv_cache, meta, output=out)

        fwd()
        torch.cuda.synchronize()
        per_req = []
        start = 0
        for r, n in enumerate(query_lens):
            self.k_hist[r].append(k[start : start + n].float().cpu().numpy())
            self.v_hist[r].append(v[start : start + n].float().cpu().numpy())
            per_req.append((r, start, n, q[start : start + n].float().cpu().numpy()))
            start += n
        return out.float().cpu().numpy(), per_req, fwd

    def errors(self, out: Any, per_req: Any, sinks: Any, window: int | None) -> tuple[float, float]:
        """(relative error vs the causal reference, vs a NON-causal one: a negative control)."""
        import numpy as np

        from probe.probes.attention_ref import reference_attention, relative_error

        refs, bad = [], []
        for r, _start, n, q in per_req:
            k, v = np.concatenate(self.k_hist[r]), np.concatenate(self.v_hist[r])
            kw = {"q_start": k.shape[0] - n, "scale": self.layer.impl.scale, "sinks": sinks}
            refs.append(reference_attention(q, k, v, sliding_window=window, **kw))
            bad.append(reference_attention(q, k, v, causal=False, **kw))
        return relative_error(out, np.concatenate(refs)), relative_error(out, np.concatenate(bad))


def _setup(params: dict[str, Any], ctx: ProbeContext, details: dict[str, Any]) -> Any:
    """torch + vLLM + the layer, or a ready skipped / unsupported result."""
    ctx.phase("import")
    import torch

    if not torch.cuda.is_available():
        return skipped("no CUDA device visible to torch")
    from probe.probes import vllm_compat

    details["vllm"] = vllm_compat.runtime_version()
    backend = str(params["backend"])
    if backend not in vllm_compat.runtime_attention_backends():
        return skipped(f"attention backend {backend!r} is not in this vLLM's AttentionBackendEnum")
    if params.get("mla"):
        return skipped("MLA layouts are probed by the engine attention cell, not the layer probe")
    if params.get("fa_version"):
        refused = fa_unavailable(int(params["fa_version"]))
        if refused is not None:
            refused["details"].update(details)
            return refused
    _ensure_runtime(torch)
    _reset_backend_caches()
    return torch


def _build(params: dict[str, Any], ctx: ProbeContext, torch: Any, max_len: int) -> Any:
    """(cfg, layer) or a ready ``unsupported`` result when vLLM refuses the configuration."""
    from probe.probes import vllm_compat

    ctx.phase("build")
    try:
        cfg = vllm_config(params, max_len)
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(cfg):
            layer = build_layer(params, cfg, torch)
    except (ValueError, NotImplementedError, AssertionError) as exc:
        text = f"{type(exc).__name__}: {exc}"
        if vllm_compat.is_refusal(exc) or (isinstance(exc, AssertionError) and "support" in str(exc)):
            return unsupported(text)
        raise
    return cfg, layer


def _selected(layer: Any) -> dict[str, Any]:
    be = layer.attn_backend
    return {
        "selected_backend": be.get_name() if hasattr(be, "get_name") else str(be),
        "impl_class": type(layer.impl).__name__,
        "fa_version": getattr(layer.impl, "vllm_flash_attn_version", None),
    }


def _ptx_jit(details: dict[str, Any], torch: Any) -> str | None:
    """Why the first launches will JIT-compile PTX in the driver (FlashAttention without SASS here)."""
    from probe.probes.ptxjit import fa_ptx_jit

    if not details.get("fa_version"):
        return None
    major, minor = torch.cuda.get_device_capability(0)
    return fa_ptx_jit(details["fa_version"], major * 10 + minor)


def _measure(
    layer: Any, cfg: Any, params: dict[str, Any], ctx: ProbeContext, details: dict[str, Any]
) -> tuple[dict[str, float], dict[str, float]]:
    """Prefill then decode steps through the layer; (timings, relative errors by step)."""
    import torch

    from probe.sandbox import gpulock

    prompts = [int(p) for p in params.get("prompt_lens", DEFAULT_PROMPTS)]
    steps, seed = int(params.get("decode_steps", 4)), int(params.get("seed", 0))
    iters, warmup = int(params.get("iters", 10)), int(params.get("warmup", 3))
    try:
        sizes = layer.attn_backend.get_supported_kernel_block_sizes()
    except (AttributeError, NotImplementedError):
        sizes = []
    bs = pick_block_size(sizes)
    cfg.cache_config.block_size = bs  # the engine resolves it from the backend the same way
    batch = Batch(prompts, max(prompts) + steps + 16, bs, seed, torch)
    cfg.cache_config.num_gpu_blocks = batch.num_blocks  # the engine sets it after profiling (FLEX reads it)
    run = _Run(layer, cfg, batch, torch)
    sinks = layer._probe_sinks
    sinks_np = None if sinks is None else sinks.float().cpu().numpy()
    window = params.get("sliding_window")
    details.update(block_size=bs, kv_cache_shape=list(run.kv_cache.shape), prompt_lens=prompts)
    gen = torch.Generator().manual_seed(seed)
    timings: dict[str, float] = {}
    errors: dict[str, float] = {}
    # the first call may JIT-compile (FlashInfer, Triton, CuTe-DSL: compiler processes the runner sees;
    # the driver's PTX JIT: in-process, so declared as phase "jit"): unlocked
    jit = details.get("ptx_jit")
    ctx.phase("jit" if jit else "prefill")
    t0 = time.perf_counter()
    out, per_req, fwd = run.step(prompts, gen)
    timings["first_forward_s"] = time.perf_counter() - t0
    ctx.phase("prefill")
    errors["prefill"], control = run.errors(out, per_req, sinks_np, window)
    details["control_errors"] = {"noncausal_prefill": control}
    with gpulock.gpu_exclusive():
        timings["prefill_ms"] = _time_ms(fwd, torch, warmup, iters)
    ctx.phase("jit" if jit else "decode")
    t0 = time.perf_counter()
    for i in range(steps):
        out, per_req, fwd = run.step([1] * len(prompts), gen)
        errors[f"decode{i + 1}"] = run.errors(out, per_req, sinks_np, window)[0]
        if i == 0:
            timings["first_decode_s"] = time.perf_counter() - t0  # may JIT-compile the decode kernels
            ctx.phase("decode")
    with gpulock.gpu_exclusive():
        timings["decode_ms"] = _time_ms(fwd, torch, warmup, iters)
    return timings, errors


def run(params: dict[str, Any], ctx: ProbeContext) -> dict[str, Any]:
    """Attention-layer cell (see the module docstring for the params)."""
    from probe.probes.attention_ref import ATTENTION_TOLERANCE

    details: dict[str, Any] = {
        "reference": "float32 attention (causal, GQA, sinks, sliding window) over the layer's own inputs",
        "metric": "relative L2 error",
        "tolerance": ATTENTION_TOLERANCE,
        "sinks": bool(params.get("sinks")),
    }
    torch = _setup(params, ctx, details)
    if isinstance(torch, dict):
        return torch
    prompts = [int(p) for p in params.get("prompt_lens", DEFAULT_PROMPTS)]
    t0 = time.perf_counter()
    built = _build(params, ctx, torch, max(prompts) + int(params.get("decode_steps", 4)) + 64)
    if isinstance(built, dict):
        built["details"].update(details)
        return built
    cfg, layer = built
    timings_build = time.perf_counter() - t0  # EngineArgs -> VllmConfig, then the Attention layer
    details.update(_selected(layer))
    ctx.note("selected", details["selected_backend"])
    ptx = _ptx_jit(details, torch)
    if ptx:
        details["ptx_jit"] = ptx
        ctx.note("jit", ptx)
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(cfg):
        timings, errors = _measure(layer, cfg, params, ctx, details)
    timings["build_s"] = timings_build
    timings["cell_s"] = time.perf_counter() - t0
    details["errors"] = errors
    degraded = [f"PTX JIT instead of SASS: {details['ptx_jit']}"] if details.get("ptx_jit") else []
    asked, ran = params.get("fa_version"), details.get("fa_version")
    if asked and ran and int(asked) != int(ran):
        degraded.append(f"asked for FlashAttention {asked}, vLLM ran FlashAttention {ran}")
    worst = max(errors.values())
    if not worst < ATTENTION_TOLERANCE:  # also catches NaN / inf
        return result(
            "wrong_output",
            f"attention output off the float32 reference: relative L2 error {worst:.3g} "
            f"> {ATTENTION_TOLERANCE} ({errors})",
            timings=timings,
            ref_error=worst if math.isfinite(worst) else None,
            details=details,
            degraded=degraded,
        )
    from probe.probes.ptxjit import DRIVER_CACHE_HINT

    hint = DRIVER_CACHE_HINT if details.get("ptx_jit") else None
    return result("ok", None, timings=timings, ref_error=worst, details=details, degraded=degraded, hint=hint)
