"""The warm pre-pass (`probe run --warm-jit`): compile the JIT modules a plan needs
once, before the timed cells, and report where the JIT caches are and how big they got.

* FlashInfer MoE: the CUTLASS fused-MoE module of this GPU (``flashinfer.jit.fused_moe.
  gen_cutlass_fused_moe_sm<NN>_module``) built through ``flashinfer.jit.build_jit_specs`` — one
  ninja over every source file, as parallel as the machine allows (``MAX_JOBS`` / ninja's default).
  A cold build took > 300 s on an H100 inside a timed MoE cell (matrices/measured, H100 provenance).
* Attention: each given attention-layer cell runs once untimed (``iters=1``): its first forward
  JIT-compiles whatever that backend needs (FlashInfer prefill / decode modules, Triton kernels,
  FLEX's inductor kernels, FA4's CuTe-DSL kernels) into the on-disk caches the timed cells then load.

Params: ``flashinfer_moe`` (bool), ``attention_cells`` (list of attention-layer params).
The pass reports ``ok`` only for what it really built AND loaded: the MoE module is built and loaded
(``JitSpec.build_and_load``), the attention layer ran its forward. A failing build or import raises (the
sandbox classifies it: ``jit_failed``, ``import_error`` ...); an attention backend that refuses the layout
returns that refusal. The build's progress is visible to the parent: the child names the module's
``build.ninja`` (``jit_build_file``, whose steps the parent counts on disk) and FlashInfer prints ninja's
``[N/M]`` lines (``FLASHINFER_JIT_VERBOSE=1``).

:func:`warm_needs` says which plan cells wait for which pre-pass cell (the others run beside it).
"""

from __future__ import annotations

import time
from typing import Any

from probe.cell_params import CellKind
from probe.cells import CellSpec, ProbeContext
from probe.probes.common import result, skipped

MOE_WARM_ID = "warm/flashinfer-moe"

WARM_TARGET = "probe.probes.jit_warm:run"
WARM_TIMEOUT_S = 1800.0

_MOE_GEN = {90: "gen_cutlass_fused_moe_sm90_module", 100: "gen_cutlass_fused_moe_sm100_module",
            103: "gen_cutlass_fused_moe_sm103_module", 120: "gen_cutlass_fused_moe_sm120_module",
            89: "gen_cutlass_fused_moe_sm89_module"}  # fmt: skip


def moe_spec_name(sm: int) -> str | None:
    """FlashInfer's generator of the CUTLASS fused-MoE module for compute capability ``sm`` (e.g. 90)."""
    if sm in _MOE_GEN:
        return _MOE_GEN[sm]
    if sm // 10 == 12:
        return _MOE_GEN[120]
    if sm // 10 == 10 or sm // 10 == 11:
        return _MOE_GEN[100]
    return None


def warmed(kind: str, how: str) -> frozenset[str]:
    """The backends the pre-pass warms (the backend catalog's ``warm``): attention backends whose first
    forward compiles code (``layout``: FlashInfer's JIT modules, Triton kernels, FLEX's inductor kernels,
    FA4's CuTe-DSL kernels, and FA2 / FA3, which ship compiled but may carry no SASS for the GPU — the
    driver then JIT-compiles their PTX at the first launch, for minutes; whether it does is known only in
    the child, probes/ptxjit.py, and a warm run of a module that has SASS costs about a second), and the
    MoE backend whose module it builds (``module``: FlashInfer's CUTLASS fused MoE, :func:`moe_spec_name`)."""
    from probe.catalog.backends import catalog

    return frozenset(b.name for b in catalog().records(kind) if b.warm == how)


def compiles_on_first_forward(params: dict[str, Any]) -> bool:
    """Whether an attention-layer cell's first forward may JIT-compile (so the pre-pass warms it)."""
    return str(params.get("backend", "")) in warmed("attention", "layout")


def _layout_tag(p: dict[str, Any]) -> str:
    fa = f"/fa{p['fa_version']}" if p.get("fa_version") else ""
    tag = f"{p.get('backend')}{fa}/h={p.get('num_heads')}/kv={p.get('num_kv_heads')}/d={p.get('head_dim')}"
    return (
        tag
        + ("/sinks" if p.get("sinks") else "")
        + (f"/sw={p['sliding_window']}" if p.get("sliding_window") else "")
    )


def refused_before_compiling(quant: str | None, sm: int | None) -> bool:
    """vLLM refuses the warmed MoE backend (``flashinfer_cutlass``) for this quant (on this GPU) in its
    selection, before any JIT (the backend catalog: the quants it takes, the lowest GPU per quant): such a
    cell does not wait for the module. An engine's quant None (the model's own) is not known here: it
    waits."""
    from probe.catalog.backends import catalog

    if quant is None:
        return False
    for name in warmed("moe", "module"):
        rec = catalog().find("moe", name)
        if rec is None or quant not in rec.vllm.quants:
            return True
        floor = rec.vllm.min_sm.get(quant)
        return sm is not None and floor is not None and sm < floor
    return True


def _warm_id(s: CellSpec, sm: int | None = None) -> str | None:
    """The pre-pass cell a plan cell waits for: the FlashInfer CUTLASS MoE module (MoE layer and engine
    cells on ``flashinfer_cutlass``, unless vLLM refuses them before compiling), or its layout's attention
    warm-up (attention-layer cells whose first forward compiles); None: it needs no pre-pass."""
    moe = s.params.get("backend") if s.kind == "moe" else s.params.get("moe_backend")
    if s.kind in ("moe", "engine") and moe in warmed("moe", "module"):
        return None if refused_before_compiling(s.params.get("quant"), sm) else MOE_WARM_ID
    if (
        s.kind == "attention"
        and s.target.endswith("attention_layer:run")
        and compiles_on_first_forward(s.params)
    ):
        return f"warm/{_layout_tag(s.params)}"
    return None


def warm_needs(specs: list[CellSpec], sm: int | None = None) -> dict[str, str]:
    """Plan cell id -> the id of the pre-pass cell it waits for (only the cells that need one; ``sm``:
    the GPU, when known)."""
    out: dict[str, str] = {}
    for s in specs:
        wid = _warm_id(s, sm)
        if wid is not None:
            out[s.id] = wid
    return out


def warm_specs(
    specs: list[CellSpec], limit_s: float = WARM_TIMEOUT_S, sm: int | None = None
) -> list[CellSpec]:
    """The pre-pass cells for a plan, one per JIT module group so they build in parallel: the FlashInfer
    CUTLASS MoE module when a cell runs on ``flashinfer_cutlass``, and one untimed run per distinct
    (JIT-compiling attention backend, FA version, head layout) of the attention-layer cells. They run
    isolated, in a journal of their own (not matrix cells), each within ``limit_s``."""
    out: list[CellSpec] = []
    layouts: dict[str, dict[str, Any]] = {}
    for s in specs:
        wid = _warm_id(s, sm)
        if wid == MOE_WARM_ID and not any(w.id == MOE_WARM_ID for w in out):
            env = {"FLASHINFER_JIT_VERBOSE": "1"}  # ninja's [N/M] lines reach the parent
            out.append(_warm_spec(MOE_WARM_ID, {"flashinfer_moe": True}, limit_s, env))
        elif wid is not None and wid != MOE_WARM_ID:
            layouts.setdefault(wid, dict(s.params))
    out += [_warm_spec(wid, {"attention_cells": [p]}, limit_s) for wid, p in layouts.items()]
    return out


def _warm_spec(
    cid: str, params: dict[str, Any], limit_s: float, env: dict[str, str] | None = None
) -> CellSpec:
    return CellSpec(
        id=cid,
        kind=CellKind.IMPORT,
        target=WARM_TARGET,
        params=params,
        env=env or {},
        timeout_s=limit_s,
        isolate=True,
    )


def _build_flashinfer_moe(sm: int, out: dict[str, Any], ctx: ProbeContext) -> str | None:
    """Build and load FlashInfer's CUTLASS MoE module for ``sm``; None when done, else why not."""
    import importlib

    name = moe_spec_name(sm)
    if name is None:
        return f"FlashInfer has no CUTLASS fused-MoE module for sm_{sm}"
    fused = importlib.import_module("flashinfer.jit.fused_moe")
    spec = getattr(fused, name)()
    prebuilt = spec.aot_path.exists()  # shipped built (flashinfer-jit-cache / AOT)
    cached = spec.jit_library_path.exists()
    units = len(getattr(spec, "sources", []) or [])
    ctx.note("jit", f"FlashInfer {spec.name} ({units} translation units + link)")
    ctx.note("jit_build_file", str(spec.ninja_path))
    t0 = time.perf_counter()
    spec.build_and_load()  # builds what is missing (ninja: objects already built are kept), then loads
    out["flashinfer_moe"] = {
        "module": spec.name,
        "generator": name,
        "build_s": round(time.perf_counter() - t0, 1),
        "prebuilt": str(spec.aot_path) if prebuilt else None,
        "was_cached": cached,
        "units": units + 1,
        "loaded": True,
    }
    return None


def _warm_attention(cells: list[dict[str, Any]], ctx: ProbeContext) -> list[dict[str, Any]]:
    """Each layout's untimed forward. An exception (the backend does not import, a build failed) is not
    caught: the sandbox classifies it, and the pre-pass cell says what went wrong."""
    from probe.probes import attention_layer

    done = []
    for params in cells:
        t0 = time.perf_counter()
        r = attention_layer.run({**params, "iters": 1, "warmup": 0, "decode_steps": 1}, ctx)
        done.append({"outcome": r["outcome"], "reason": r.get("reason"), "backend": params.get("backend"),
                     "fa_version": params.get("fa_version"), "head_dim": params.get("head_dim"),
                     "wall_s": round(time.perf_counter() - t0, 1)})  # fmt: skip
    return done


def run(params: dict[str, Any], ctx: ProbeContext) -> dict[str, Any]:
    from probe.sandbox import jit

    details: dict[str, Any] = {"caches_before": jit.cache_report()}
    ctx.phase("import")
    import torch

    if not torch.cuda.is_available():
        return skipped("no CUDA device visible to torch", details=details)
    major, minor = torch.cuda.get_device_capability(0)
    sm = major * 10 + minor
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    ctx.phase("jit")
    refused: list[str] = []
    if params.get("attention_cells"):
        details["attention"] = _warm_attention(list(params["attention_cells"]), ctx)
        timings["attention_s"] = time.perf_counter() - t0
        refused += [f"{a['backend']}: {a['reason']}" for a in details["attention"] if a["outcome"] != "ok"]
    if params.get("flashinfer_moe"):
        ctx.phase("jit")
        t1 = time.perf_counter()
        why = _build_flashinfer_moe(sm, details, ctx)
        timings["flashinfer_moe_s"] = time.perf_counter() - t1
        if why:
            refused.append(why)
    timings["total_s"] = time.perf_counter() - t0
    details["caches_after"] = jit.cache_report()
    details["sm"] = sm
    if refused:  # nothing usable was built for it: not "ok"
        return result("unsupported", "; ".join(refused)[:500], timings=timings, details=details)
    return result("ok", None, timings=timings, details=details)
