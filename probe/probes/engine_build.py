"""Building and stopping the ``vllm.LLM`` of an engine-backed cell (``engine`` and ``attention`` kinds).

Runs only inside the sandboxed child (torch / vLLM are imported inside the functions). Shared by
:mod:`probe.probes.engine`: the LLM(...) keyword arguments of a cell (:func:`engine_kwargs`), the checks
that turn a configuration the installed vLLM or this host cannot take into ``skipped`` / ``unsupported``
before the engine starts (:func:`build_llm`), and what the built model actually selected
(:func:`inspect_model`).

Tensor parallelism: ``tensor_parallel_size`` > 1 starts one vLLM worker process per rank (vLLM's
multiprocessing executor; the engine core stays in this child). The rank processes inherit this child's
``PROBE_CELL_TOKEN``, so the runner's tree teardown finds them even outside the process group. A cell
asking for more GPUs than torch sees is ``skipped``; ``enable_expert_parallel`` is checked against the
installed ``EngineArgs`` fields first (``skipped`` when absent).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from probe.cell_params import AttentionParams, EngineParams
from probe.cells import ProbeContext
from probe.probes.common import skipped, unsupported
from probe.probes.introspect import selected_moe_backend


def engine_arg_names() -> set[str]:
    """The field names of the installed vLLM's ``EngineArgs``."""
    from vllm.engine.arg_utils import EngineArgs

    return {f.name for f in dataclasses.fields(EngineArgs)}


def engine_kwargs(p: AttentionParams | EngineParams) -> dict[str, Any]:
    """LLM(...) keyword arguments for a cell's params (moe_backend / attention_backend / fa_version)."""
    kw: dict[str, Any] = {
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "enforce_eager": True,
        "max_model_len": p.effective_max_model_len,
        "max_num_seqs": 8,
        "gpu_memory_utilization": p.effective_gpu_memory_utilization,
        "enable_prefix_caching": False,
        "seed": 0,
    }
    if p.moe_choice and p.moe_choice != "auto":
        kw["moe_backend"] = p.moe_choice
    attn = p.attention_choice
    if attn and attn != "auto":
        kw["attention_backend"] = attn
    if p.fa_version:
        kw["attention_config"] = {"flash_attn_version": p.fa_version}
    if p.effective_tp > 1:
        kw["tensor_parallel_size"] = p.effective_tp  # one rank (worker process) per GPU
    if p.expert_parallel:
        kw["enable_expert_parallel"] = True
    for key, value in p.extra_engine_args.items():
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
    have = engine_arg_names()
    return sorted(n for n in names if n not in have)


def language_model_only_kwargs() -> dict[str, Any]:
    """LLM(...) kwargs that run a multimodal model text-only (``language_model_only`` where the
    installed vLLM has it — 0.26 and 0.33 do — else every modality limited to 0 prompts)."""
    if "language_model_only" in engine_arg_names():
        return {"language_model_only": True}
    return {"limit_mm_per_prompt": {"image": 0, "video": 0}}


def write_config(cfg: dict[str, Any]) -> str:
    d = tempfile.mkdtemp(prefix="probe_model_")
    (Path(d) / "config.json").write_text(json.dumps(cfg))
    return d


def attention_modules(model: Any) -> list[tuple[str, Any]]:
    return [
        (n, m)
        for n, m in model.named_modules()
        if hasattr(m, "impl") and hasattr(m, "attn_backend") and hasattr(m, "num_kv_heads")
    ]


def inspect_model(model: Any) -> dict[str, Any]:
    """Which attention backend / MoE backend the built model actually uses."""
    out: dict[str, Any] = {"attention": {}, "moe": {}}
    for name, m in attention_modules(model):
        be = m.attn_backend
        out["attention"][name] = {
            "backend": be.get_name() if hasattr(be, "get_name") else str(be),
            "impl": type(m.impl).__name__,
            "fa_version": getattr(m.impl, "vllm_flash_attn_version", None),
        }
    for name, m in model.named_modules():
        qm = getattr(m, "_quant_method", None)
        if qm is not None and hasattr(m, "routed_experts"):
            out["moe"][name] = selected_moe_backend(qm)
    return out


def shutdown(llm: Any) -> None:
    import torch

    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # best effort: the child exits after the cell anyway
        pass
    del llm
    gc.collect()
    torch.cuda.empty_cache()


def parallel_skip_reason(
    p: AttentionParams | EngineParams, visible_gpus: int, arg_names: set[str]
) -> str | None:
    """Why a tensor- / expert-parallel cell cannot run here (too few GPUs, an engine argument this vLLM
    lacks), or None."""
    tp, dp = p.effective_tp, p.effective_dp
    if tp * dp > 1 and visible_gpus < tp * dp:
        what = f"tensor_parallel_size={tp}" + (f" x data_parallel_size={dp}" if dp > 1 else "")
        return f"{what} needs {tp * dp} GPUs; torch sees {visible_gpus}"
    for name, wanted in (
        ("tensor_parallel_size", tp > 1),
        ("enable_expert_parallel", p.expert_parallel),
        ("data_parallel_size", dp > 1),
    ):
        if wanted and name not in arg_names:
            return f"this vLLM has no engine argument {name} (--{name.replace('_', '-')})"
    return None


def _precheck(p: AttentionParams | EngineParams, details: dict[str, Any]) -> dict[str, Any] | None:
    """A ready ``skipped`` / ``unsupported`` result for what this vLLM / host cannot run, or None."""
    import torch
    import vllm

    from probe.probes import vllm_compat

    if p.moe_choice and p.moe_choice != "auto":
        reason = vllm_compat.moe_backend_skip_reason(p.moe_choice)
        if reason:
            return skipped(reason)
    attn = p.attention_choice
    if attn and attn != "auto" and attn not in vllm_compat.runtime_attention_backends():
        return skipped(f"attention backend {attn!r} is not in this vLLM's AttentionBackendEnum")
    if p.fa_version:  # a FA module that does not import raises ImportError: import_error, not unsupported
        from probe.probes.attention_layer import fa_unavailable

        refused = fa_unavailable(p.fa_version)
        if refused is not None:
            refused["details"].update(details)
            return refused
    extra = p.extra_engine_args
    missing = unknown_engine_args(extra) if extra else []
    if missing:
        return skipped(
            f"vLLM {vllm.__version__} has no engine argument {', '.join(missing)} "
            f"(--{missing[0].replace('_', '-')}): this variant does not apply to it"
        )
    if p.effective_tp > 1 or p.expert_parallel or p.effective_dp > 1:
        visible = torch.cuda.device_count()
        details["parallel"] = {
            "tensor_parallel_size": p.effective_tp,
            "enable_expert_parallel": p.expert_parallel,
            "visible_gpus": visible,
        }
        if p.effective_dp > 1:
            details["parallel"]["data_parallel_size"] = p.effective_dp
        reason = parallel_skip_reason(p, visible, engine_arg_names())
        if reason:
            return skipped(reason)
    return None


def prepare_llm(
    config: dict[str, Any], p: AttentionParams | EngineParams, ctx: ProbeContext, details: dict[str, Any]
) -> tuple[str, dict[str, Any]] | dict[str, Any]:
    """The model folder and LLM(...) keyword arguments of a cell, or a ready `skipped` /
    `unsupported` result when this vLLM or host cannot take the configuration."""
    ctx.phase("import")
    import torch

    if not torch.cuda.is_available():
        return skipped("no CUDA device visible to torch")
    import vllm

    details["vllm"] = vllm.__version__
    early = _precheck(p, details)
    if early is not None:
        return early
    model_dir = write_config(config)
    kw = engine_kwargs(p)
    if "vision_config" in config:
        # a multimodal wrapper around the text model under test (Qwen3.5): skip the vision tower and
        # the multimodal processor (it would need a tokenizer / image processor from the model dir)
        kw.update(language_model_only_kwargs())
    details["llm_kwargs"] = kw
    return model_dir, kw


def build_llm(
    config: dict[str, Any], p: AttentionParams | EngineParams, ctx: ProbeContext, details: dict[str, Any]
) -> tuple[Any, float] | dict[str, Any]:
    """LLM(...) or a ready `skipped` / `unsupported` result when this vLLM or host cannot take the
    configuration, or vLLM refuses it cleanly."""
    import vllm

    from probe.probes import vllm_compat

    prepared = prepare_llm(config, p, ctx, details)
    if isinstance(prepared, dict):
        return prepared
    model_dir, kw = prepared
    ctx.phase("engine_init")
    t0 = time.perf_counter()
    try:
        llm = vllm.LLM(model=model_dir, **kw)
    except (ValueError, NotImplementedError) as exc:
        if vllm_compat.is_refusal(exc):
            return unsupported(f"{type(exc).__name__}: {exc}", details=details)
        raise
    return llm, time.perf_counter() - t0
