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

import gc
import json
import logging
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from probe.cells import ProbeContext
from probe.probes.common import result, skipped, unsupported

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


def attention_test_config(shape: dict[str, int], hidden: int, vocab: int = 2048) -> dict[str, Any]:
    """A 1-layer dense decoder config at a model's attention head layout (for the attention probe)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": int(hidden),
        "intermediate_size": 1024,
        "num_hidden_layers": 1,
        "num_attention_heads": int(shape["num_heads"]),
        "num_key_value_heads": int(shape["num_kv_heads"]),
        "head_dim": int(shape["head_dim"]),
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


def engine_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """LLM(...) keyword arguments for a cell's params (moe_backend / attention_backend / fa_version)."""
    kw: dict[str, Any] = {
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "enforce_eager": True,
        "max_model_len": int(params.get("max_model_len", 1024)),
        "max_num_seqs": 8,
        "gpu_memory_utilization": float(params.get("gpu_memory_utilization", 0.5)),
        "enable_prefix_caching": False,
        "seed": 0,
    }
    if params.get("moe_backend") and params["moe_backend"] != "auto":
        kw["moe_backend"] = params["moe_backend"]
    attn = params.get("attention_backend") or params.get("backend")
    if attn and attn != "auto":
        kw["attention_backend"] = attn
    if params.get("fa_version"):
        kw["attention_config"] = {"flash_attn_version": int(params["fa_version"])}
    for key, value in (params.get("engine_args") or {}).items():
        kw[key] = _engine_value(value)  # e.g. gdn_prefill_backend=triton (checked against EngineArgs first)
    return kw


def _engine_value(text: Any) -> Any:
    """'2048' -> 2048, 'false' -> False, '0.5' -> 0.5, '{"a": 1}' -> dict; other text stays a string."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def unknown_engine_args(names: Any) -> list[str]:
    """Names in ``names`` that the installed vLLM's ``EngineArgs`` does not have."""
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    have = {f.name for f in dataclasses.fields(EngineArgs)}
    return sorted(n for n in names if n not in have)


def _language_model_only_kwargs() -> dict[str, Any]:
    """LLM(...) kwargs that run a multimodal model text-only (``language_model_only`` where the
    installed vLLM has it — 0.26 and 0.33 do — else every modality limited to 0 prompts)."""
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    if "language_model_only" in {f.name for f in dataclasses.fields(EngineArgs)}:
        return {"language_model_only": True}
    return {"limit_mm_per_prompt": {"image": 0, "video": 0}}


def _write_config(cfg: dict[str, Any]) -> str:
    d = tempfile.mkdtemp(prefix="probe_model_")
    (Path(d) / "config.json").write_text(json.dumps(cfg))
    return d


def _attention_modules(model: Any) -> list[tuple[str, Any]]:
    return [
        (n, m)
        for n, m in model.named_modules()
        if hasattr(m, "impl") and hasattr(m, "attn_backend") and hasattr(m, "num_kv_heads")
    ]


def _inspect(model: Any) -> dict[str, Any]:
    """Which attention backend / MoE backend the built model actually uses."""
    out: dict[str, Any] = {"attention": {}, "moe": {}}
    for name, m in _attention_modules(model):
        be = m.attn_backend
        out["attention"][name] = {
            "backend": be.get_name() if hasattr(be, "get_name") else str(be),
            "impl": type(m.impl).__name__,
            "fa_version": getattr(m.impl, "vllm_flash_attn_version", None),
        }
    for name, m in model.named_modules():
        qm = getattr(m, "_quant_method", None)
        if qm is not None and hasattr(m, "routed_experts"):
            from probe.probes.moe import _selected_backend

            out["moe"][name] = _selected_backend(qm)
    return out


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
    mods = _attention_modules(model)
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


def _shutdown(llm: Any) -> None:
    import torch

    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # best effort: the child exits after the cell anyway
        pass
    del llm
    gc.collect()
    torch.cuda.empty_cache()


def _build_llm(
    config: dict[str, Any], params: dict[str, Any], ctx: ProbeContext, details: dict[str, Any]
) -> tuple[Any, float] | dict[str, Any]:
    """LLM(...) or a ready `unsupported` result when vLLM refuses the configuration cleanly."""
    from probe.probes import vllm_compat

    ctx.phase("import")
    import torch

    if not torch.cuda.is_available():
        return skipped("no CUDA device visible to torch")
    import vllm

    details["vllm"] = vllm.__version__
    if params.get("moe_backend") and params["moe_backend"] != "auto":
        reason = vllm_compat.moe_backend_skip_reason(params["moe_backend"])
        if reason:
            return skipped(reason)
    attn = params.get("attention_backend") or params.get("backend")
    if attn and attn != "auto" and attn not in vllm_compat.runtime_attention_backends():
        return skipped(f"attention backend {attn!r} is not in this vLLM's AttentionBackendEnum")
    if params.get("fa_version"):
        why = vllm_compat.fa_versions_available().get(int(params["fa_version"]))
        if why:
            return unsupported(
                f"FlashAttention {params['fa_version']} unavailable here: {why}", details=details
            )
    extra = params.get("engine_args") or {}
    missing = unknown_engine_args(extra) if extra else []
    if missing:
        return skipped(
            f"vLLM {vllm.__version__} has no engine argument {', '.join(missing)} "
            f"(--{missing[0].replace('_', '-')}): this variant does not apply to it"
        )
    model_dir = _write_config(config)
    kw = engine_kwargs(params)
    if "vision_config" in config:
        # a multimodal wrapper around the text model under test (Qwen3.5): skip the vision tower and
        # the multimodal processor (it would need a tokenizer / image processor from the model dir)
        kw.update(_language_model_only_kwargs())
    details["llm_kwargs"] = kw
    ctx.phase("engine_init")
    t0 = time.perf_counter()
    try:
        llm = vllm.LLM(model=model_dir, **kw)
    except (ValueError, NotImplementedError) as exc:
        if vllm_compat.is_refusal(exc):
            return unsupported(f"{type(exc).__name__}: {exc}", details=details)
        raise
    return llm, time.perf_counter() - t0


def run_attention(params: dict[str, Any], ctx: ProbeContext) -> dict[str, Any]:
    """Attention cell: params backend, fa_version, num_heads, num_kv_heads, head_dim, hidden, model, mla."""
    details: dict[str, Any] = {
        "reference": "torch SDPA (causal, GQA) over the layer's captured q/k/v",
        "metric": "relative L2 error",
        "tolerance": ATTENTION_TOLERANCE,
    }
    prompt_len = int(params.get("prompt_len", 200))
    decode_steps = int(params.get("decode_steps", 8))
    if params.get("mla"):
        return _run_mla_attention(params, ctx, details)
    cfg = attention_test_config(params, int(params.get("hidden", 2048)))
    built = _build_llm(cfg, {**params, "max_model_len": prompt_len + decode_steps + 64}, ctx, details)
    if isinstance(built, dict):
        return built
    llm, init_s = built
    import torch
    import vllm

    n_layers = llm.apply_model(_install_hooks)[0]
    details["engine"] = llm.apply_model(_inspect)[0]
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
    _shutdown(llm)
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


def _run_mla_attention(params: dict[str, Any], ctx: ProbeContext, details: dict[str, Any]) -> dict[str, Any]:
    from probe.catalog.models import resolve_model, synthetic_hf_config

    prof = resolve_model(str(params["model"]))
    cfg = synthetic_hf_config(prof, num_layers=1, quant="bf16")
    for key in ("n_routed_experts", "num_experts"):
        if key in cfg:
            cfg[key] = 8  # the MoE is irrelevant to this cell; keep it small
    cfg["vocab_size"] = 2048
    details["degraded_note"] = "MLA: engine smoke check (finite logprobs), no SDPA reference"
    return _build_and_generate(cfg, params, ctx, details, cfg["vocab_size"], 8, mla=True)


def run(params: dict[str, Any], ctx: ProbeContext) -> dict[str, Any]:
    """Engine cell: params model, moe_backend, attention_backend, fa_version, quant, layers, tokens."""
    from probe.catalog.models import resolve_model, synthetic_hf_config, text_config_of

    prof = resolve_model(str(params["model"]))
    quant = params.get("quant") or prof.quant
    cfg = synthetic_hf_config(prof, num_layers=int(params.get("layers", 2)), quant=quant)
    details: dict[str, Any] = {
        "config": {k: v for k, v in cfg.items() if k != "quantization_config"},
        "quantization_config": cfg.get("quantization_config"),
    }
    vocab = int(text_config_of(cfg)["vocab_size"])
    return _build_and_generate(cfg, params, ctx, details, vocab, int(params.get("tokens", 8)))


def _build_and_generate(
    cfg: dict[str, Any],
    params: dict[str, Any],
    ctx: ProbeContext,
    details: dict[str, Any],
    vocab: int,
    tokens: int,
    mla: bool = False,
) -> dict[str, Any]:
    """Start the engine, record what it built, generate, shut down; the cell's result."""
    built = _build_llm(cfg, params, ctx, details)
    if isinstance(built, dict):
        return built
    llm, init_s = built
    details["engine"] = llm.apply_model(_inspect)[0]
    ctx.phase("generate")
    out, problem, t = _generate_check(llm, vocab, tokens)
    details.update(out)
    _shutdown(llm)
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
