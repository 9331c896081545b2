"""The plan flags of ``probe run`` (and ``benchmarks/bench_run.py``): argparse → :class:`PlanOptions`.

Not a verb (``probe.cli.main.VERBS`` lists those). The flag syntax (comma lists, ``moe:attention[:fa]``,
``KEY=VALUE``) is parsed here; :func:`probe.probes.planner.build_plan` checks the values and raises
``OptionError`` naming the option, which :func:`flag_error` words as the flag.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from probe.cli.flags import with_flag_errors
from probe.errors import UsageError

if TYPE_CHECKING:
    from probe.cells import CellSpec
    from probe.probes.planner import EnginePair, PlanOptions


def _csv(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(t) for t in _csv(text))
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"{flag} needs positive integers, got {text!r}")
    return vals


def add_plan_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    from probe.probes.planner import DEFAULT_EXPERTS, DEFAULT_FA, DEFAULT_MODELS, DEFAULT_TP, KINDS, QUANTS

    # `probe run` hands in its own "plan" group; argparse deprecates nesting groups
    g = parser if isinstance(parser, argparse._ArgumentGroup) else parser.add_argument_group("what to probe")
    g.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"cell kinds to plan, comma-separated (default: {','.join(KINDS)})",
    )
    g.add_argument(
        "--moe-backends",
        default="all",
        help="--moe-backend values to probe (default 'all': every value the installed vLLM accepts)",
    )
    g.add_argument(
        "--quants", default=",".join(QUANTS), help=f"MoE quant schemes (default: {','.join(QUANTS)})"
    )
    g.add_argument(
        "--experts",
        default=",".join(map(str, DEFAULT_EXPERTS)),
        help="expert counts for the kernel matrix (default: %(default)s)",
    )
    g.add_argument(
        "--tp",
        default=",".join(map(str, DEFAULT_TP)),
        help="TP sizes for the per-model MoE shapes (default: %(default)s)",
    )
    g.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help="model profiles (names/aliases, see `probe models`); the first one gives the kernel "
        "matrix its hidden/intermediate/top_k (default: %(default)s)",
    )
    g.add_argument(
        "--attention-backends",
        default="all",
        help="AttentionBackendEnum names (default 'all': every NVIDIA decoder backend of this vLLM)",
    )
    g.add_argument(
        "--fa-versions",
        default=",".join(map(str, DEFAULT_FA)),
        help="FlashAttention versions for FLASH_ATTN cells (default: %(default)s)",
    )
    _add_engine_arguments(g)


def _add_engine_arguments(g: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The flags of engine cells: pairs, quant, layers, extra engine arguments, the parallel layouts."""
    g.add_argument(
        "--pairs",
        default=None,
        help="engine pairs moe:attention[:fa], comma-separated, e.g. marlin:TRITON_ATTN,cutlass:FLASH_ATTN:3 "
        "(default: auto:auto, triton-or-marlin:TRITON_ATTN, auto:FLASH_ATTN per model)",
    )
    g.add_argument(
        "--engine-quant", default=None, help="quant scheme of engine cells (default: each model's own format)"
    )
    g.add_argument(
        "--engine-layers", type=int, default=2, help="layers of the synthetic engine model (default 2)"
    )
    g.add_argument(
        "--engine-args",
        default=None,
        metavar="KEY=VALUE[,...]",
        help="extra vLLM engine arguments for every engine cell, e.g. max_num_batched_tokens=2048 (Gated-"
        "DeltaNet models also get a gdn_prefill_backend=triton variant of each pair unless you set it)",
    )
    g.add_argument(
        "--engine-tp",
        default="auto",
        metavar="auto|N[,N...]",
        help="tensor_parallel_size of engine cells (default auto: 1 and every power of two up to the usable "
        "GPUs nvidia-smi shows: 2 on 2 GPUs, 2 and 4 on 4, up to 8); sizes > 1 run one rank per GPU, MoE "
        "models also with enable_expert_parallel, and are planned only when that many GPUs are visible "
        "unless --force-multi-gpu",
    )
    g.add_argument(
        "--engine-dp",
        default="",
        metavar="N[,N...]",
        help="also plan expert-parallel engines of MoE models at these data-parallel sizes (one engine per "
        "DP rank, vLLM's offline DP recipe), one cell per all2all backend of --all2all; off by default",
    )
    g.add_argument(
        "--all2all",
        default="all",
        metavar="all|NAME[,NAME...]",
        help="the --all2all-backend values of --engine-dp cells (default all: every one probe's catalog "
        "knows; those whose package the image lacks end not_run, names this vLLM removed end skipped)",
    )
    g.add_argument(
        "--force-multi-gpu",
        action="store_true",
        help="plan --engine-tp sizes > 1 even when fewer GPUs are visible (the child then skips them)",
    )


def parse_pairs(text: str) -> tuple[EnginePair, ...]:
    """``moe:attention[:fa],...`` → pairs (attention upper-cased, ``auto`` kept)."""
    from probe.probes.planner import EnginePair

    out: list[EnginePair] = []
    for item in _csv(text):
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
            raise UsageError(f"--pairs item {item!r} is not moe:attention[:fa_version]")
        fa: int | None = None
        if len(parts) == 3:
            if parts[2] not in ("2", "3", "4"):
                raise UsageError(f"--pairs item {item!r}: FA version must be 2, 3 or 4")
            fa = int(parts[2])
        attn = "auto" if parts[1].lower() == "auto" else parts[1].upper()
        out.append(EnginePair(parts[0].lower().replace("-", "_"), attn, fa))
    return tuple(out)


def parse_engine_args(text: str | None) -> dict[str, str]:
    """``KEY=VALUE[,KEY=VALUE]`` (vLLM engine argument names, ``-`` or ``_``) -> {key: value}."""
    out: dict[str, str] = {}
    for item in _csv(text or ""):
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key or not value.strip() or not key.isidentifier():
            raise UsageError(
                f"--engine-args item {item!r} is not KEY=VALUE", hint="e.g. gdn_prefill_backend=triton"
            )
        out[key] = value.strip()
    return out


def engine_tp_sizes(text: str, visible_gpus: int | None) -> tuple[int, ...]:
    """``--engine-tp``: ``auto`` → 1 and every power of two up to the visible GPUs (2 on a 2-GPU host,
    2 and 4 on a 4-GPU one, up to 8); else the listed sizes."""
    if text.strip().lower() == "auto":
        return tuple(n for n in (1, 2, 4, 8) if n == 1 or n <= (visible_gpus or 0))
    return _ints(text, "--engine-tp")


def _all_or(text: str) -> tuple[str, ...] | None:
    return None if text == "all" else tuple(_csv(text))


def plan_options(args: argparse.Namespace) -> PlanOptions:
    """The typed options for the plan flags in ``args`` (see :func:`add_plan_arguments`)."""
    from probe.probes.planner import PlanOptions
    from probe.sandbox.gpu_procs import visible_gpu_count

    tp_text = getattr(args, "engine_tp", "1")
    kinds = tuple(_csv(args.kinds))
    dp_text = getattr(args, "engine_dp", "") or ""
    wants_gpus = "engine" in kinds and (tp_text.strip() != "1" or bool(dp_text.strip()))
    visible = visible_gpu_count() if wants_gpus else None
    return PlanOptions(
        kinds=kinds,
        moe_backends=_all_or(args.moe_backends),
        quants=tuple(_csv(args.quants)),
        experts=_ints(args.experts, "--experts"),
        tp=_ints(args.tp, "--tp"),
        models=tuple(_csv(args.models)),
        attention_backends=_all_or(args.attention_backends),
        fa_versions=_ints(args.fa_versions, "--fa-versions"),
        pairs=parse_pairs(args.pairs) if args.pairs else None,
        engine_quant=args.engine_quant,
        engine_layers=args.engine_layers,
        engine_args=parse_engine_args(getattr(args, "engine_args", None)),
        engine_tp=engine_tp_sizes(tp_text, visible),
        engine_dp=_ints(dp_text, "--engine-dp") if dp_text.strip() else (),
        all2all=_all_or(getattr(args, "all2all", "all")),
        visible_gpus=visible,
        force_multi_gpu=bool(getattr(args, "force_multi_gpu", False)),
        vllm_search_path=_search_path(getattr(args, "python", None)),
    )


def _search_path(python: str | None) -> tuple[str, ...] | None:
    """The import path of ``--python`` (its vLLM is the one planned for), or None."""
    if not python:
        return None
    from probe.run.digests import import_path

    return tuple(import_path(python))


def build_plan_from_args(args: argparse.Namespace) -> list[CellSpec]:
    """``build_plan(plan_options(args))`` with option errors worded as flags."""
    from probe.probes.planner import build_plan

    opts = plan_options(args)
    return with_flag_errors(lambda: build_plan(opts))
