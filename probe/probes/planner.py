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

The planner takes a typed, frozen :class:`PlanOptions` (``probe.cli.plan_args`` builds it from the
flags) and raises :class:`probe.errors.OptionError` naming the option, which the CLI words as a flag.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from probe.cell_params import (
    PLANNED_KINDS,
    AttentionParams,
    CellBudget,
    CellKind,
    EngineParams,
    ImportParams,
    MoeParams,
)
from probe.cells import CellSpec
from probe.errors import OptionError, UsageError
from probe.probes import vllm_compat
from probe.probes.engine import ENGINE_ENV
from probe.probes.moe import QUANTS, estimate_mem_gib

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = tuple(k.value for k in PLANNED_KINDS)
DEFAULT_EXPERTS = (8, 16, 32, 64, 128, 256, 512, 60, 144, 160)
DEFAULT_MODELS = ("122b", "35b", "nano")
DEFAULT_FA = (2, 3, 4)
DEFAULT_TP = (1, 2, 4)
FA_VERSIONS = (2, 3, 4)

MOE_TARGET = "probe.probes.moe:run"
ATTN_TARGET = "probe.probes.engine:run_attention"  # MLA layouts: a 1-layer engine
LAYER_TARGET = "probe.probes.attention_layer:run"  # other layouts: the layer in a warm worker
ENGINE_TARGET = "probe.probes.engine:run"
IMPORT_TARGET = "probe.probes.imports:run"

MOE_TIMEOUT_S = 300.0
IMPORT_TIMEOUT_S = 300.0
ENGINE_TIMEOUT_S = 600.0
ATTENTION_MEM_GIB = 30.0
LAYER_TIMEOUT_S = 180.0  # + the runner's --jit-timeout while it compiles
LAYER_MEM_GIB = 4.0
ENGINE_MEM_GIB = 40.0
MULTI_GPU_ENGINE_TIMEOUT_S = 900.0  # one worker process per rank, NCCL / custom all-reduce set-up


@dataclass(frozen=True)
class EnginePair:
    """One engine cell's pairing: a ``--moe-backend`` value, an attention backend, a FA version."""

    moe: str
    attention: str
    fa_version: int | None = None


@dataclass(frozen=True)
class PlanOptions:
    """What to plan. ``None`` for the backend lists means every backend the installed vLLM accepts;
    ``pairs=None`` means :func:`default_pairs` per model."""

    kinds: tuple[str, ...] = KINDS
    moe_backends: tuple[str, ...] | None = None
    quants: tuple[str, ...] = QUANTS
    experts: tuple[int, ...] = DEFAULT_EXPERTS
    tp: tuple[int, ...] = DEFAULT_TP
    models: tuple[str, ...] = DEFAULT_MODELS
    attention_backends: tuple[str, ...] | None = None
    fa_versions: tuple[int, ...] = DEFAULT_FA
    pairs: tuple[EnginePair, ...] | None = None
    engine_quant: str | None = None
    engine_layers: int = 2
    engine_args: Mapping[str, str] = field(default_factory=dict)
    #: tensor-parallel sizes of engine cells; a size > 1 is planned only when ``visible_gpus`` has that
    #: many GPUs (None: unknown) or ``force_multi_gpu``; MoE models also get an expert-parallel variant
    engine_tp: tuple[int, ...] = (1,)
    #: data-parallel sizes of expert-parallel engine cells of MoE models (one engine per DP rank, TP 1),
    #: one cell per all2all backend in ``all2all`` (None: every catalog record); () plans none
    engine_dp: tuple[int, ...] = ()
    all2all: tuple[str, ...] | None = None
    visible_gpus: int | None = None
    force_multi_gpu: bool = False
    #: where to read the installed vLLM's source (the site-packages of ``probe run --python``; None: this
    #: interpreter's)
    vllm_search_path: tuple[str, ...] | None = None


def _unknown(option: str, values: tuple[str, ...], known: tuple[str, ...]) -> None:
    bad = [v for v in values if v not in known]
    if bad or not values:
        raise OptionError(option, f"unknown {', '.join(bad) or '(empty)'}; known: {', '.join(known)}")


def _positive(option: str, values: tuple[int, ...]) -> None:
    if not values or any(v <= 0 for v in values):
        raise OptionError(option, f"needs positive integers, got {','.join(map(str, values)) or '(none)'}")


def check_options(opts: PlanOptions) -> None:
    """Raise :class:`OptionError` for a value no plan can use."""
    _unknown("kinds", opts.kinds, KINDS)
    _unknown("quants", opts.quants, QUANTS)
    _positive("experts", opts.experts)
    _positive("tp", opts.tp)
    _positive("engine_tp", opts.engine_tp)
    if opts.engine_dp:
        _positive("engine_dp", opts.engine_dp)
    if opts.all2all is not None:
        _unknown("all2all", opts.all2all, tuple(all2all_names()))
    _positive("fa_versions", opts.fa_versions)
    if any(f not in FA_VERSIONS for f in opts.fa_versions):
        raise OptionError("fa_versions", "takes 2, 3 and/or 4")
    if not opts.models:
        raise OptionError("models", "needs at least one model profile")
    if opts.engine_layers < 1:
        raise OptionError("engine_layers", f"needs at least 1 layer, got {opts.engine_layers}")
    for p in opts.pairs or ():
        if p.fa_version is not None and p.fa_version not in FA_VERSIONS:
            raise OptionError("pairs", f"{p.moe}:{p.attention}:{p.fa_version}: FA version must be 2, 3 or 4")


def default_pairs(quant: str) -> list[EnginePair]:
    moe = "triton" if quant in ("bf16", "fp8", "fp8_block") else "marlin"
    return [EnginePair("auto", "auto"), EnginePair(moe, "TRITON_ATTN"), EnginePair("auto", "FLASH_ATTN")]


def engine_variants(model: Any, user_args: Mapping[str, str]) -> list[dict[str, str]]:
    """Engine-argument variants planned for a model: the user's, plus for Gated-DeltaNet hybrids
    (Qwen3.5 / 3.6 / Next) the Triton GDN prefill: vLLM picks FlashInfer's GDN prefill on Hopper
    whenever it is asked for 'auto', and an image without FlashInfer then fails at the first prefill."""
    variants = [dict(user_args)]
    hybrid = getattr(model, "hybrid", None) or {}
    if "linear_attention_gated_deltanet" in hybrid and "gdn_prefill_backend" not in user_args:
        variants.append({**user_args, "gdn_prefill_backend": "triton"})
    return variants


def _engine_backed_cell(
    cid: str, target: str, params: AttentionParams | EngineParams, mem_gib: float
) -> CellSpec:
    """An attention or engine cell: a whole ``vllm.LLM`` in its own process, which claims
    ``gpu_memory_utilization`` of the device, so under ``-j N`` it runs with nothing beside it."""
    budget = CellBudget(timeout_s=ENGINE_TIMEOUT_S, mem_gib=mem_gib, exclusive=True)
    return CellSpec.make(cid, target, params, budget, env=ENGINE_ENV, isolate=True)


def _args_tag(engine_args: Mapping[str, str]) -> str:
    return "".join(f"/{k}={v}" for k, v in sorted(engine_args.items()))


def _moe_backends(opts: PlanOptions, info: vllm_compat.StaticVllmInfo) -> list[str]:
    if opts.moe_backends is None:
        return list(info.moe_backends) if info.moe_backends else list(vllm_compat.known_moe_backends())
    moe = [b.lower().replace("-", "_") for b in opts.moe_backends]
    if info.moe_backends is not None:
        unknown = [b for b in moe if b not in info.moe_backends]
        if unknown:
            raise OptionError(
                "moe_backends",
                f"vLLM {info.version} does not accept {', '.join(unknown)}",
                hint=f"accepted: {', '.join(info.moe_backends)}",
            )
    return moe


def _attention_backends(opts: PlanOptions, info: vllm_compat.StaticVllmInfo) -> list[str]:
    if opts.attention_backends is None:
        members = info.attention_backends or vllm_compat.default_attention_backends()
        return vllm_compat.probed_attention_backends(members)
    attn = [a.upper() for a in opts.attention_backends]
    if info.attention_backends:
        unknown = [a for a in attn if a not in info.attention_backends]
        if unknown:
            raise OptionError(
                "attention_backends",
                f"not in vLLM {info.version}'s AttentionBackendEnum: {', '.join(unknown)}",
            )
    return attn


def enumerate_backends(opts: PlanOptions, info: vllm_compat.StaticVllmInfo) -> tuple[list[str], list[str]]:
    """(MoE backends, attention backends) to plan, from the options and the statically read vLLM."""
    return _moe_backends(opts, info), _attention_backends(opts, info)


def _moe_cell(backend: str, quant: str, shape: dict[str, int], model: str | None, tag: str) -> CellSpec:
    e, h, i, k, tp = shape["experts"], shape["hidden"], shape["intermediate"], shape["top_k"], shape["tp"]
    params = MoeParams(
        backend=backend,
        quant=quant,
        experts=e,
        hidden=h,
        intermediate=i,
        top_k=k,
        tp=tp,
        model=model,
        batch_sizes=[1, 64],
        matrix=tag,
    )
    budget = CellBudget(timeout_s=MOE_TIMEOUT_S, mem_gib=estimate_mem_gib(e, h, i))
    return CellSpec.make(f"moe/{backend}/{quant}/E={e}/H={h}/I={i}/k={k}/tp={tp}", MOE_TARGET, params, budget)


def _moe_cells(opts: PlanOptions, models: list[Any], backends: list[str]) -> list[CellSpec]:
    """(a) the kernel matrix at the first MoE model's shape, (b) each MoE model's shapes per TP."""
    moe_models = [m for m in models if m.is_moe]
    if not moe_models:
        return []
    out: list[CellSpec] = []
    base = moe_models[0].moe_shape(1)
    assert base is not None  # an MoE profile has an MoE shape
    for e in opts.experts:
        shape = {**base, "experts": e, "top_k": min(base["top_k"], e)}
        out += [_moe_cell(b, q, shape, None, "kernel") for b in backends for q in opts.quants]
    for m in moe_models:
        mq = [q for q in opts.quants if q in (m.quant_formats or [m.quant]) or q == "bf16"]
        for tp in opts.tp:
            try:
                shape = m.moe_shape(tp)
            except UsageError as exc:
                log.warning("skipping %s at TP=%d: %s", m.name, tp, exc)
                continue
            assert shape is not None
            out += [_moe_cell(b, q, shape, m.slug, "model") for b in backends for q in mq]
    return out


def _attention_cells(
    opts: PlanOptions, models: list[Any], backends: list[str], info: vllm_compat.StaticVllmInfo
) -> list[CellSpec]:
    """Per distinct head layout (TP=1): every probed backend, FLASH_ATTN once per FA version."""
    out: list[CellSpec] = []
    seen_layouts: set[tuple[int, int, int, bool]] = set()
    for m in models:
        a = m.attention_shape(1)
        mla = m.mla is not None
        layout = (a["num_heads"], a["num_kv_heads"], a["head_dim"], mla)
        if layout in seen_layouts:
            continue
        seen_layouts.add(layout)
        if not mla:
            chosen = backends
        elif info.attention_backends:
            chosen = vllm_compat.probed_attention_backends(info.attention_backends, mla=True)
        else:
            chosen = vllm_compat.default_attention_backends(mla=True)
        for b in chosen:
            for fa in opts.fa_versions if b == "FLASH_ATTN" else (None,):
                params = AttentionParams(
                    backend=b,
                    fa_version=fa,
                    num_heads=a["num_heads"],
                    num_kv_heads=a["num_kv_heads"],
                    head_dim=a["head_dim"],
                    hidden=m.hidden_size,
                    model=m.slug,
                    mla=mla,
                )
                fa_tag = f"/fa{fa}" if fa else ""
                cid = (
                    f"attention/{b}{fa_tag}/h={a['num_heads']}/kv={a['num_kv_heads']}"
                    f"/d={a['head_dim']}{'/mla' if mla else ''}"
                )
                if mla:
                    out.append(_engine_backed_cell(cid, ATTN_TARGET, params, ATTENTION_MEM_GIB))
                else:
                    out.append(_layer_cell(cid, params, m))
    return out


def _layer_cell(cid: str, params: AttentionParams, model: Any) -> CellSpec:
    """An attention-layer cell (``probe.probes.attention_layer``): no engine, so a warm worker, one per
    backend (``env``) so no KV-layout / selector state crosses backends; the model's sinks included."""
    sinks = bool((model.hybrid or {}).get("attention_sinks"))
    p = replace(params, sinks=True) if sinks else params
    budget = CellBudget(timeout_s=LAYER_TIMEOUT_S, mem_gib=LAYER_MEM_GIB)
    env = {"PROBE_ATTN_BACKEND": params.backend}
    return CellSpec.make(cid + ("/sinks" if sinks else ""), LAYER_TARGET, p, budget, env=env)


def engine_parallel_variants(opts: PlanOptions, model: Any) -> list[tuple[int, bool]]:
    """(tensor_parallel_size, expert parallel) per engine cell of ``model``: every ``engine_tp`` size the
    visible GPUs allow (or all, forced), and for an MoE model at TP > 1 the expert-parallel variant."""
    out: list[tuple[int, bool]] = []
    for tp in opts.engine_tp:
        if tp > 1 and not opts.force_multi_gpu and (opts.visible_gpus or 0) < tp:
            log.warning(
                "engine cells at TP=%d need %d GPUs, %s visible: not planned", tp, tp, opts.visible_gpus
            )
            continue
        if tp > 1:
            try:
                model.attention_shape(tp)
                if model.is_moe:
                    model.moe_shape(tp)
            except UsageError as exc:
                log.warning("skipping engine cells of %s at TP=%d: %s", model.name, tp, exc)
                continue
        out.append((tp, False))
        if tp > 1 and model.is_moe:
            out.append((tp, True))
    return out


def all2all_names() -> list[str]:
    """The expert-parallel all2all backends of the catalog (vLLM's ``--all2all-backend`` values)."""
    from probe.catalog.backends import catalog

    return catalog().names("all2all")


def _engine_cell(
    m: Any, pair: EnginePair, extra: dict[str, str], quant: str, layers: int, par: tuple[int, bool, int]
) -> CellSpec:
    tp, ep, dp = par
    params = EngineParams(
        model=m.slug,
        moe_backend=pair.moe,
        attention_backend=pair.attention,
        fa_version=pair.fa_version,
        quant=quant,
        layers=layers,
        engine_args=extra,
        tensor_parallel_size=tp if tp > 1 else None,
        enable_expert_parallel=True if ep else None,
        data_parallel_size=dp if dp > 1 else None,
    )
    fa_tag = f"/fa{pair.fa_version}" if pair.fa_version else ""
    par_tag = (f"/tp={tp}" if tp > 1 else "") + (f"/dp={dp}" if dp > 1 else "") + ("/ep" if ep else "")
    cid = f"engine/{m.slug}/{quant}/{pair.moe}+{pair.attention}{fa_tag}{_args_tag(extra)}{par_tag}"
    if tp * dp == 1:
        return _engine_backed_cell(cid, ENGINE_TARGET, params, ENGINE_MEM_GIB)
    gpus = tp * dp
    budget = CellBudget(
        timeout_s=MULTI_GPU_ENGINE_TIMEOUT_S, mem_gib=ENGINE_MEM_GIB, exclusive=True, gpus=gpus
    )
    return CellSpec.make(cid, ENGINE_TARGET, params, budget, env=ENGINE_ENV, isolate=True)


def _dp_cells(opts: PlanOptions, m: Any, quant: str, pairs: list[EnginePair]) -> list[CellSpec]:
    """Expert-parallel engines at each ``engine_dp`` size (TP 1), one per all2all backend: the first
    pairing only unless ``--pairs`` named them (the all2all, not the kernels, is under test)."""
    if not m.is_moe or not opts.engine_dp:
        return []
    chosen = list(opts.pairs) if opts.pairs else pairs[:1]
    names = list(opts.all2all) if opts.all2all is not None else all2all_names()
    out: list[CellSpec] = []
    for dp in opts.engine_dp:
        if dp < 2:
            continue
        if not opts.force_multi_gpu and (opts.visible_gpus or 0) < dp:
            log.warning(
                "engine cells at DP=%d need %d GPUs, %s visible: not planned", dp, dp, opts.visible_gpus
            )
            continue
        for extra in engine_variants(m, opts.engine_args):
            for pair in chosen:
                for name in names:
                    args = {**extra, "all2all_backend": name}
                    out.append(_engine_cell(m, pair, args, quant, opts.engine_layers, (1, True, dp)))
    return out


def _engine_cells(opts: PlanOptions, models: list[Any]) -> list[CellSpec]:
    """Per model: each pairing, for each engine-argument variant, at each parallel layout; then the
    data-parallel expert-parallel cells (one per all2all backend)."""
    out: list[CellSpec] = []
    for m in models:
        quant = opts.engine_quant or m.quant
        pairs = list(opts.pairs) if opts.pairs else default_pairs(quant)
        layouts = engine_parallel_variants(opts, m)
        for extra in engine_variants(m, opts.engine_args):
            for pair in pairs:
                out += [
                    _engine_cell(m, pair, extra, quant, opts.engine_layers, (tp, ep, 1)) for tp, ep in layouts
                ]
        out += _dp_cells(opts, m, quant, pairs)
    return out


def build_plan(opts: PlanOptions) -> list[CellSpec]:
    """All cells for ``opts``; raises :class:`OptionError` / ``UsageError`` (unknown model)."""
    from probe.modelcfg.resolve import resolve_model

    check_options(opts)
    models = [resolve_model(n) for n in opts.models]
    info = vllm_compat.static_info(list(opts.vllm_search_path) if opts.vllm_search_path else None)
    if not info.installed:
        log.info("vLLM not importable by the planner; planning the static superset of backends")
    moe_backends, attn_backends = enumerate_backends(opts, info)
    kinds = set(opts.kinds)
    specs: list[CellSpec] = []
    if CellKind.IMPORT.value in kinds:
        budget = CellBudget(timeout_s=IMPORT_TIMEOUT_S)
        specs.append(CellSpec.make("import", IMPORT_TARGET, ImportParams(), budget))
    if CellKind.MOE.value in kinds:
        specs += _moe_cells(opts, models, moe_backends)
    if CellKind.ATTENTION.value in kinds:
        specs += _attention_cells(opts, models, attn_backends, info)
    if CellKind.ENGINE.value in kinds:
        specs += _engine_cells(opts, models)
    unique: dict[str, CellSpec] = {}
    for s in specs:
        unique.setdefault(s.id, s)
    return list(unique.values())
