"""Engine-level probes: the real ``vllm.LLM`` on a synthetic config.json with dummy weights.

* ``run`` (kind ``engine``) — the moe x attention pairing probe: a model profile cut to 1-2 layers
  (real expert count and widths, ``quantization_config`` for the quant scheme), ``load_format="dummy"``,
  ``skip_tokenizer_init=True``, ``enforce_eager=True``, explicit ``moe_backend`` / ``attention_backend``
  (and ``attention_config.flash_attn_version``); generates a few tokens from token ids. ``ok`` when tokens
  come out and their logprobs are finite.
* ``run_attention`` (kind ``attention``) — one attention backend at a model's head layout: a 1-layer
  dense decoder (``Qwen3ForCausalLM``: hidden size, heads, KV heads and head_dim of the profile) runs
  a prefill and decode steps through vLLM's own scheduler / metadata builders / KV cache; forward hooks
  on the attention layer capture q, k, v and the backend's output, which are compared with
  ``torch.nn.functional.scaled_dot_product_attention`` (causal, GQA) over the captured q/k/v.  Timed
  with CUDA events in the hooks.  Why the engine and not hand-built metadata: the attention metadata
  builders change between vLLM releases; the engine path exercises exactly what serving runs and
  still gives a kernel-level reference (the hooks see the layer's true inputs and output).
  MLA backends (MLA models only) get an engine smoke check (finite logprobs), marked degraded.

Both run the engine in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set by the planner in the cell
env) so hooks and exceptions stay in this child; each cell needs a fresh child (``isolate=True``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import Any

from probe.cell_params import AttentionParams, EngineParams
from probe.cells import ProbeContext
from probe.probes.common import result, skipped
from probe.probes.engine_build import (
    attention_modules,
    build_llm,
    engine_kwargs,
    inspect_model,
    prepare_llm,
    shutdown,
    unknown_engine_args,
)
from probe.probes.hf_config import reduction_problems, synthetic_hf_config, text_config_of

__all__ = [
    "ENGINE_ENV",
    "attention_test_config",
    "engine_kwargs",
    "run",
    "run_attention",
    "unknown_engine_args",
]

log = logging.getLogger(__name__)

ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
ATTENTION_TOLERANCE = 0.02  # relative L2, bf16 q/k/v, float32 SDPA reference

_CAPTURE: dict[str, Any] = {"on": False, "calls": []}


def attention_test_config(p: AttentionParams, vocab: int = 2048) -> dict[str, Any]:
    """A 1-layer dense decoder config at a model's attention head layout (for the attention probe)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": p.hidden,
        "intermediate_size": 1024,
        "num_hidden_layers": 1,
        "num_attention_heads": p.num_heads,
        "num_key_value_heads": p.num_kv_heads,
        "head_dim": p.head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def _install_hooks(model: Any) -> int:
    import torch

    def pre(mod: Any, args: tuple[Any, ...]) -> None:
        if not _CAPTURE["on"]:
            return
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        mod._probe_start = ev

    def post(mod: Any, args: tuple[Any, ...], out: Any) -> None:
        if not _CAPTURE["on"]:
            return
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        q, k, v = args[0], args[1], args[2]
        _CAPTURE["calls"].append(
            {
                "q": q.detach().reshape(q.shape[0], mod.num_heads, -1).clone(),
                "k": None if k is None else k.detach().reshape(k.shape[0], mod.num_kv_heads, -1).clone(),
                "v": None if v is None else v.detach().reshape(v.shape[0], mod.num_kv_heads, -1).clone(),
                "out": out.detach().reshape(out.shape[0], mod.num_heads, -1).clone(),
                "scale": float(getattr(mod.impl, "scale", 0.0) or 0.0),
                "start": mod._probe_start,
                "end": ev,
            }
        )

    # Dummy weights are ~U(-1e-3, 1e-3): q.k would be ~0 and attention uniform, which any kernel gets
    # "right". Qwen3's q_norm / k_norm RMS-normalise q and k; unit norm weights make the logits O(1).
    for name, mod in model.named_modules():
        if name.endswith(("q_norm", "k_norm")) and getattr(mod, "weight", None) is not None:
            mod.weight.data.fill_(1.0)
    mods = attention_modules(model)
    for _, m in mods[:1]:  # the single attention layer of the test model
        m.register_forward_pre_hook(pre)
        m.register_forward_hook(post)
    return len(mods)


def _sdpa_reference(
    calls: list[dict[str, Any]], prompt_len: int, control: dict[str, float] | None = None
) -> tuple[dict[str, float], list[str]]:
    """Relative L2 error of each captured call vs causal GQA SDPA over the captured q/k/v."""
    import torch

    control = {} if control is None else control
    errs: dict[str, float] = {}
    notes: list[str] = []
    ks: list[Any] = []
    vs: list[Any] = []
    for i, c in enumerate(calls):
        n = c["q"].shape[0]
        expect = prompt_len if i == 0 else 1
        if n < expect:
            notes.append(f"call {i}: {n} tokens, expected {expect}; stopped comparing")
            break
        q, k, v, out = (c[x][:expect].float() for x in ("q", "k", "v", "out"))
        ks.append(k)
        vs.append(v)
        kk, vv = torch.cat(ks), torch.cat(vs)
        rep = q.shape[1] // kk.shape[1]
        kk, vv = kk.repeat_interleave(rep, dim=1), vv.repeat_interleave(rep, dim=1)
        scale = c["scale"] or 1.0 / math.sqrt(q.shape[-1])
        total = kk.shape[0]
        # query token j (absolute position total - expect + j) sees keys 0..that position
        pos_q = torch.arange(total - expect, total, device=q.device)[:, None]
        mask = torch.arange(total, device=q.device)[None, :] <= pos_q
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1),
            kk.transpose(0, 1),
            vv.transpose(0, 1),
            attn_mask=mask,
            scale=scale,
        ).transpose(0, 1)
        if not torch.isfinite(out).all():
            errs[f"call{i}"] = float("inf")
            continue
        errs["prefill" if i == 0 else f"decode{i}"] = float((out - ref).norm() / ref.norm().clamp(min=1e-12))
        if i == 0:  # negative control: the same output against a NON-causal reference must be far off
            bad = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1), scale=scale
            ).transpose(0, 1)
            control["noncausal_prefill"] = float((out - bad).norm() / bad.norm().clamp(min=1e-12))
            logits = (q.transpose(0, 1) @ kk.transpose(0, 1).transpose(1, 2)) * scale
            probs = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)
            control["mean_max_attention_prob"] = float(probs.max(dim=-1).values.mean())
    return errs, notes


def run_attention(params: dict[str, Any], ctx: ProbeContext) -> dict[str, Any]:
    """Attention cell: params backend, fa_version, num_heads, num_kv_heads, head_dim, hidden, model, mla."""
    details: dict[str, Any] = {
        "reference": "torch SDPA (causal, GQA) over the layer's captured q/k/v",
        "metric": "relative L2 error",
        "tolerance": ATTENTION_TOLERANCE,
    }
    p = AttentionParams.from_wire(params)
    prompt_len, decode_steps = p.effective_prompt_len, p.effective_decode_steps
    if p.mla:
        return _run_mla_attention(p, ctx, details)
    cfg = attention_test_config(p)
    built = build_llm(cfg, replace(p, max_model_len=prompt_len + decode_steps + 64), ctx, details)
    if isinstance(built, dict):
        return built
    llm, init_s = built
    import torch
    import vllm

    n_layers = llm.apply_model(_install_hooks)[0]
    details["engine"] = llm.apply_model(inspect_model)[0]
    if not n_layers:
        raise RuntimeError("no attention layer found in the built model (probe cannot hook it)")
    sp = vllm.SamplingParams(max_tokens=decode_steps, temperature=0.0, ignore_eos=True, detokenize=False)
    gen = torch.Generator().manual_seed(0)
    prompt = {"prompt_token_ids": torch.randint(3, cfg["vocab_size"], (prompt_len,), generator=gen).tolist()}
    ctx.phase("generate")
    warm = {"prompt_token_ids": torch.randint(3, cfg["vocab_size"], (prompt_len,), generator=gen).tolist()}
    llm.generate([warm], sp, use_tqdm=False)  # warm-up: JIT / autotune outside the timed, captured run
    _CAPTURE["calls"].clear()
    _CAPTURE["on"] = True
    llm.generate([prompt], sp, use_tqdm=False)
    torch.cuda.synchronize()
    _CAPTURE["on"] = False
    calls = list(_CAPTURE["calls"])
    _CAPTURE["calls"].clear()
    ctx.phase("reference")
    control: dict[str, float] = {}
    errs, notes = _sdpa_reference(calls, prompt_len, control)
    details["control_errors"] = control
    times = [c["start"].elapsed_time(c["end"]) for c in calls]
    timings = {"init_s": init_s}
    if times:
        timings["prefill_ms"] = times[0]
        dec = sorted(times[1:])
        if dec:
            timings["decode_ms"] = dec[len(dec) // 2]
    details.update({"errors": errs, "calls": [int(c["q"].shape[0]) for c in calls], "notes": notes})
    shutdown(llm)
    if not errs:
        return result(
            "wrong_output",
            "no attention call could be compared (see details.notes)",
            timings=timings,
            details=details,
        )
    worst = max(errs.values())
    if not math.isfinite(worst) or worst > ATTENTION_TOLERANCE:
        return result(
            "wrong_output",
            f"attention output off the SDPA reference: relative L2 error {worst:.3g} "
            f"> {ATTENTION_TOLERANCE} ({errs})",
            timings=timings,
            ref_error=worst,
            details=details,
        )
    return result("ok", None, timings=timings, ref_error=worst, details=details)


def _generate_check(
    llm: Any, vocab: int, n_tokens: int
) -> tuple[dict[str, Any], str | None, dict[str, float]]:
    import vllm

    sp = vllm.SamplingParams(
        max_tokens=n_tokens, temperature=0.0, ignore_eos=True, detokenize=False, logprobs=1
    )
    prompts = [
        {"prompt_token_ids": [1 + (i * 37) % (vocab - 2) for i in range(24)]},
        {"prompt_token_ids": [1 + (i * 101) % (vocab - 2) for i in range(9)]},
    ]
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sp, use_tqdm=False)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sp, use_tqdm=False)
    gen2_s = time.perf_counter() - t0
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    lps = [
        lp
        for o in outs
        for step in (o.outputs[0].logprobs or [])
        for lp in [v.logprob for v in step.values()]
    ]
    problem = None
    if any(len(t) != n_tokens for t in tokens):
        problem = f"generated {[len(t) for t in tokens]} tokens, expected {n_tokens} each"
    elif not lps or not all(math.isfinite(x) for x in lps):
        problem = "non-finite logprobs (NaN/inf in the logits)"
    n = sum(len(t) for t in tokens)
    info: dict[str, Any] = {
        "tokens": tokens,
        "min_logprob": min(lps) if lps else None,
        "max_logprob": max(lps) if lps else None,
    }
    if lps and problem is None and max(lps) - min(lps) < 1e-3:
        # dummy weights ~U(-1e-3, 1e-3) give near-constant logits: the cell proves the stack runs
        # end to end (init, weight processing, forward, sampling), not the numerics
        info["uniform_logits"] = True
    return (
        info,
        problem,
        {"gen_s": gen_s, "gen2_s": gen2_s, "tokens_per_s": n / gen2_s if gen2_s > 0 else 0.0},
    )


def _run_mla_attention(p: AttentionParams, ctx: ProbeContext, details: dict[str, Any]) -> dict[str, Any]:
    from probe.modelcfg.resolve import resolve_model

    prof = resolve_model(str(p.model))
    cfg = synthetic_hf_config(prof, num_layers=1, quant="bf16")
    for key in ("n_routed_experts", "num_experts"):
        if key in cfg:
            cfg[key] = 8  # the MoE is irrelevant to this cell; keep it small
    cfg["vocab_size"] = 2048
    details["degraded_note"] = "MLA: engine smoke check (finite logprobs), no SDPA reference"
    return _build_and_generate(cfg, p, ctx, details, cfg["vocab_size"], 8, mla=True)


def run(params: dict[str, Any], ctx: ProbeContext) -> dict[str, Any]:
    """Engine cell: params model, moe_backend, attention_backend, fa_version, quant, layers, tokens."""
    from probe.modelcfg.resolve import resolve_model

    p = EngineParams.from_wire(params)
    prof = resolve_model(p.model)
    quant = p.quant or prof.quant
    cfg = synthetic_hf_config(prof, num_layers=p.layers, quant=quant)
    details: dict[str, Any] = {
        "config": {k: v for k, v in cfg.items() if k != "quantization_config"},
        "quantization_config": cfg.get("quantization_config"),
    }
    real = {"num_attention_heads": prof.num_attention_heads, "num_key_value_heads": prof.num_key_value_heads}
    problems = reduction_problems(cfg, real, p.effective_tp)
    if problems:  # the model splits; probe's reduced copy would not: say so, never blame vLLM
        details["probe_error"] = "reduced config: " + "; ".join(problems)
        return skipped(f"probe's reduced config cannot be split at TP {p.effective_tp}: {problems[0]}")
    vocab = int(text_config_of(cfg)["vocab_size"])
    if p.effective_dp > 1:
        return _data_parallel(cfg, p, ctx, details, vocab)
    return _build_and_generate(cfg, p, ctx, details, vocab, p.effective_tokens)


def _data_parallel(
    cfg: dict[str, Any], p: EngineParams, ctx: ProbeContext, details: dict[str, Any], vocab: int
) -> dict[str, Any]:
    """One engine per data-parallel rank (:mod:`probe.probes.engine_dp`), each checked as a TP engine is."""
    from probe.probes import engine_dp

    early = engine_dp.all2all_precheck(p)
    if early is not None:
        early["details"].update(details)
        return early
    prepared = prepare_llm(cfg, p, ctx, details)
    if isinstance(prepared, dict):
        return prepared
    model_dir, kw = prepared
    check = (_generate_check, inspect_model, shutdown, vocab, p.effective_tokens)
    return engine_dp.run_ranks(model_dir, kw, p, ctx, details, check)


def _build_and_generate(
    cfg: dict[str, Any],
    params: AttentionParams | EngineParams,
    ctx: ProbeContext,
    details: dict[str, Any],
    vocab: int,
    tokens: int,
    mla: bool = False,
) -> dict[str, Any]:
    """Start the engine, record what it built, generate, shut down; the cell's result."""
    built = build_llm(cfg, params, ctx, details)
    if isinstance(built, dict):
        return built
    llm, init_s = built
    details["engine"] = llm.apply_model(inspect_model)[0]
    ctx.phase("generate")
    out, problem, t = _generate_check(llm, vocab, tokens)
    details.update(out)
    shutdown(llm)
    timings = {"init_s": init_s, **t}
    if problem:
        return result("wrong_output", problem, timings=timings, details=details)
    if mla:
        degraded = ["MLA attention checked for finite output only (no SDPA reference)"]
    elif out.get("uniform_logits"):
        degraded = ["dummy weights give uniform logits: end-to-end run check, not a numeric check"]
    else:
        degraded = []
    return result("ok", None, timings=timings, details=details, degraded=degraded)
