"""The plan of a ``probe run``: which cells (CellSpec) to run, built in the parent without torch/vLLM.

Enumeration design: the parent never imports vLLM. It reads the accepted ``--moe-backend`` values and
the ``AttentionBackendEnum`` members from the installed vLLM's *source* (:func:`vllm_compat.static_info`,
``ast`` only). When that is impossible (vLLM not installed in the planning interpreter, unreadable
source) it plans the static superset :func:`vllm_compat.known_moe_backends`; in every case the child
checks again at run time with ``typing.get_args(MoEBackend)`` and returns ``skipped`` (with the reason)
for a value its vLLM does not accept — so a plan is never wrong, at worst it has skipped cells.

Cells:
* ``import`` — one cell: versions, GPU facts, compiled modules, FA / FlashInfer / DeepGEMM status.
* ``moe`` — (a) the kernel matrix: every backend x quant x E (``--experts``) at TP=1 with the first
  model's hidden / moe_intermediate / top_k; (b) per model: backend x quant (the model's quant formats
  that are in ``--quants``) at the model's real E and widths for every TP in ``--tp``.
* ``attention`` — per model head layout (TP=1): every probed attention backend; FLASH_ATTN once per
  FA version in ``--fa-versions``; MLA backends only for MLA models.
* ``engine`` — per model: the ``--pairs`` (``moe:attention[:fa]``), default ``auto:auto``,
  ``triton:TRITON_ATTN`` / ``marlin:TRITON_ATTN`` (by quant) and ``auto:FLASH_ATTN``.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from probe.cells import CellSpec
from probe.errors import UsageError
from probe.probes import vllm_compat
from probe.probes.moe import QUANTS, estimate_mem_gib

log = logging.getLogger(__name__)

KINDS = ("import", "moe", "attention", "engine")
DEFAULT_EXPERTS = (8, 16, 32, 64, 128, 256, 512, 60, 144, 160)
DEFAULT_MODELS = ("122b", "35b", "nano")
DEFAULT_FA = (2, 3, 4)

MOE_TARGET = "probe.probes.moe:run"
ATTN_TARGET = "probe.probes.engine:run_attention"
ENGINE_TARGET = "probe.probes.engine:run"
IMPORT_TARGET = "probe.probes.imports:run"


def _csv(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _ints(text: str, flag: str) -> list[int]:
    try:
        vals = [int(t) for t in _csv(text)]
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated integers, got {text!r}")
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"{flag} needs positive integers, got {text!r}")
    return vals


def add_plan_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
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
        "--tp", default="1,2,4", help="TP sizes for the per-model MoE shapes (default: %(default)s)"
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


def _resolve_models(names: list[str]) -> list[Any]:
    from probe.catalog.models import resolve_model

    return [resolve_model(n) for n in names]


def parse_pairs(text: str) -> list[tuple[str, str, int | None]]:
    out: list[tuple[str, str, int | None]] = []
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
        out.append((parts[0].lower().replace("-", "_"), attn, fa))
    return out


def default_pairs(quant: str) -> list[tuple[str, str, int | None]]:
    moe = "triton" if quant in ("bf16", "fp8", "fp8_block") else "marlin"
    return [("auto", "auto", None), (moe, "TRITON_ATTN", None), ("auto", "FLASH_ATTN", None)]


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


def engine_variants(model: Any, user_args: dict[str, str]) -> list[dict[str, str]]:
    """Engine-argument variants planned for a model: the user's, plus for Gated-DeltaNet hybrids
    (Qwen3.5 / 3.6 / Next) the Triton GDN prefill: vLLM picks FlashInfer's GDN prefill on Hopper
    whenever it is asked for 'auto', and an image without FlashInfer then fails at the first prefill."""
    variants = [dict(user_args)]
    hybrid = getattr(model, "hybrid", None) or {}
    if "linear_attention_gated_deltanet" in hybrid and "gdn_prefill_backend" not in user_args:
        variants.append({**user_args, "gdn_prefill_backend": "triton"})
    return variants


def _engine_backed_cell(cid: str, kind: Any, target: str, params: dict[str, Any]) -> CellSpec:
    """An attention or engine cell: a whole ``vllm.LLM`` in its own process, which claims
    ``gpu_memory_utilization`` of the device, so under ``-j N`` it runs with nothing beside it."""
    from probe.probes.engine import ENGINE_ENV

    return CellSpec(
        id=cid,
        kind=kind,
        target=target,
        params={**params, "exclusive": True},
        env=dict(ENGINE_ENV),
        timeout_s=600.0,
        isolate=True,
    )


def _args_tag(engine_args: dict[str, str]) -> str:
    return "".join(f"/{k}={v}" for k, v in sorted(engine_args.items()))


def enumerate_backends(
    args: argparse.Namespace, info: vllm_compat.StaticVllmInfo
) -> tuple[list[str], list[str]]:
    """(MoE backends, attention backends) to plan, from flags and the statically read vLLM."""
    if args.moe_backends == "all":
        moe = list(info.moe_backends) if info.moe_backends else list(vllm_compat.known_moe_backends())
    else:
        moe = [b.lower().replace("-", "_") for b in _csv(args.moe_backends)]
        if info.moe_backends is not None:
            unknown = [b for b in moe if b not in info.moe_backends]
            if unknown:
                raise UsageError(
                    f"--moe-backends: vLLM {info.version} does not accept {', '.join(unknown)}",
                    hint=f"accepted: {', '.join(info.moe_backends)}",
                )
    if args.attention_backends == "all":
        members = info.attention_backends or list(vllm_compat.NVIDIA_ATTENTION_BACKENDS)
        attn = vllm_compat.probed_attention_backends(members)
    else:
        attn = [a.upper() for a in _csv(args.attention_backends)]
        if info.attention_backends:
            unknown = [a for a in attn if a not in info.attention_backends]
            if unknown:
                raise UsageError(
                    f"--attention-backends: not in vLLM {info.version}'s AttentionBackendEnum: "
                    f"{', '.join(unknown)}"
                )
    return moe, attn


def _moe_cell(backend: str, quant: str, shape: dict[str, int], model: str | None, tag: str) -> CellSpec:
    e, h, i, k, tp = shape["experts"], shape["hidden"], shape["intermediate"], shape["top_k"], shape["tp"]
    params = {
        "backend": backend,
        "quant": quant,
        "experts": e,
        "hidden": h,
        "intermediate": i,
        "top_k": k,
        "tp": tp,
        "model": model,
        "batch_sizes": [1, 64],
        "matrix": tag,
        "mem_gib": estimate_mem_gib(e, h, i),
    }
    return CellSpec(
        id=f"moe/{backend}/{quant}/E={e}/H={h}/I={i}/k={k}/tp={tp}",
        kind="moe",
        target=MOE_TARGET,
        params=params,
        timeout_s=300.0,
    )


def build_plan(args: argparse.Namespace) -> list[CellSpec]:
    """All cells for the flags in ``args`` (see :func:`add_plan_arguments`)."""
    kinds = _csv(args.kinds)
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise UsageError(f"--kinds: unknown {', '.join(bad) or '(empty)'}; known: {', '.join(KINDS)}")
    quants = _csv(args.quants)
    badq = [q for q in quants if q not in QUANTS]
    if badq or not quants:
        raise UsageError(f"--quants: unknown {', '.join(badq) or '(empty)'}; known: {', '.join(QUANTS)}")
    experts = _ints(args.experts, "--experts")
    tps = _ints(args.tp, "--tp")
    fas = _ints(args.fa_versions, "--fa-versions")
    if any(f not in (2, 3, 4) for f in fas):
        raise UsageError("--fa-versions takes 2, 3 and/or 4")
    model_names = _csv(args.models)
    if not model_names:
        raise UsageError("--models needs at least one model profile")
    models = _resolve_models(model_names)
    info = vllm_compat.static_info()
    if not info.installed:
        log.info("vLLM not importable by the planner; planning the static superset of backends")
    moe_backends, attn_backends = enumerate_backends(args, info)
    specs: dict[str, CellSpec] = {}

    def add(spec: CellSpec) -> None:
        specs.setdefault(spec.id, spec)

    if "import" in kinds:
        add(CellSpec(id="import", kind="import", target=IMPORT_TARGET, timeout_s=300.0))
    moe_models = [m for m in models if m.is_moe]
    if "moe" in kinds and moe_models:
        base = moe_models[0].moe_shape(1)
        assert base is not None
        for e in experts:
            shape = {**base, "experts": e, "top_k": min(base["top_k"], e)}
            for b in moe_backends:
                for q in quants:
                    add(_moe_cell(b, q, shape, None, "kernel"))
        for m in moe_models:
            mq = [q for q in quants if q in (m.quant_formats or [m.quant]) or q == "bf16"]
            for tp in tps:
                try:
                    shape = m.moe_shape(tp)
                except UsageError as exc:
                    log.warning("skipping %s at TP=%d: %s", m.name, tp, exc)
                    continue
                assert shape is not None
                for b in moe_backends:
                    for q in mq:
                        add(_moe_cell(b, q, shape, m.slug, "model"))
    if "attention" in kinds:
        seen_layouts: set[tuple[int, int, int, bool]] = set()
        for m in models:
            a = m.attention_shape(1)
            mla = m.mla is not None
            layout = (a["num_heads"], a["num_kv_heads"], a["head_dim"], mla)
            if layout in seen_layouts:
                continue
            seen_layouts.add(layout)
            backends = (
                vllm_compat.probed_attention_backends(info.attention_backends, mla=True)
                if mla and info.attention_backends
                else list(vllm_compat.NVIDIA_MLA_BACKENDS)
                if mla
                else attn_backends
            )
            for b in backends:
                for fa in fas if b == "FLASH_ATTN" else [None]:
                    params = {
                        "backend": b,
                        "fa_version": fa,
                        "num_heads": a["num_heads"],
                        "num_kv_heads": a["num_kv_heads"],
                        "head_dim": a["head_dim"],
                        "hidden": m.hidden_size,
                        "model": m.slug,
                        "mla": mla,
                        "mem_gib": 30.0,
                    }
                    fa_tag = f"/fa{fa}" if fa else ""
                    cid = (
                        f"attention/{b}{fa_tag}/h={a['num_heads']}/kv={a['num_kv_heads']}"
                        f"/d={a['head_dim']}{'/mla' if mla else ''}"
                    )
                    add(_engine_backed_cell(cid, "attention", ATTN_TARGET, params))
    if "engine" in kinds:
        user_args = parse_engine_args(getattr(args, "engine_args", None))
        for m in models:
            quant = args.engine_quant or m.quant
            pairs = parse_pairs(args.pairs) if args.pairs else default_pairs(quant)
            for extra in engine_variants(m, user_args):
                for moe_b, attn_b, fa in pairs:
                    params = {
                        "model": m.slug,
                        "moe_backend": moe_b,
                        "attention_backend": attn_b,
                        "fa_version": fa,
                        "quant": quant,
                        "layers": args.engine_layers,
                        "mem_gib": 40.0,
                    }
                    if extra:
                        params["engine_args"] = extra
                    fa_tag = f"/fa{fa}" if fa else ""
                    cid = f"engine/{m.slug}/{quant}/{moe_b}+{attn_b}{fa_tag}{_args_tag(extra)}"
                    add(_engine_backed_cell(cid, "engine", ENGINE_TARGET, params))
    return list(specs.values())
