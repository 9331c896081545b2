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
A failing module build raises (the sandbox classifies the ninja output as ``jit_failed``); a
failing attention warm-up is recorded in ``details.attention`` and the pass goes on.
"""

from __future__ import annotations

import time
from typing import Any

from probe.cell_params import CellKind
from probe.cells import CellSpec, ProbeContext
from probe.probes.common import result, skipped

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


# Attention backends whose first forward compiles code: FlashInfer's JIT modules, Triton kernels,
# FLEX's inductor kernels, FA4's CuTe-DSL kernels; and FA2 / FA3, which ship compiled but may carry no
# SASS for the GPU (vLLM 0.26.0's FA2 on sm_90): the driver then JIT-compiles their PTX at the first
# launch, for minutes. Whether it does is known only in the child (probes/ptxjit.py); a warm run of a
# module that has SASS costs about a second, so the pre-pass warms every FLASH_ATTN layout.
_JIT_ATTENTION = {"FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "FLASH_ATTN"}


def compiles_on_first_forward(params: dict[str, Any]) -> bool:
    """Whether an attention-layer cell's first forward may JIT-compile (so the pre-pass warms it)."""
    return str(params.get("backend", "")) in _JIT_ATTENTION


def _layout_tag(p: dict[str, Any]) -> str:
    fa = f"/fa{p['fa_version']}" if p.get("fa_version") else ""
    tag = f"{p.get('backend')}{fa}/h={p.get('num_heads')}/kv={p.get('num_kv_heads')}/d={p.get('head_dim')}"
    return (
        tag
        + ("/sinks" if p.get("sinks") else "")
        + (f"/sw={p['sliding_window']}" if p.get("sliding_window") else "")
    )


def warm_specs(specs: list[CellSpec]) -> list[CellSpec]:
    """The pre-pass cells for a plan, one per JIT module group so ``-j N`` builds them in parallel:
    the FlashInfer CUTLASS MoE module when a ``flashinfer_*`` MoE cell is planned, and one untimed run
    per distinct (JIT-compiling attention backend, FA version, head layout) of the attention-layer
    cells. Run them (isolated, journal of their own: they are not matrix cells) before the timed cells."""
    out: list[CellSpec] = []
    if any(s.kind == "moe" and str(s.params.get("backend", "")).startswith("flashinfer_") for s in specs):
        out.append(_warm_spec("warm/flashinfer-moe", {"flashinfer_moe": True}))
    layouts: dict[str, dict[str, Any]] = {}
    for s in specs:
        if (
            s.kind == "attention"
            and s.target.endswith("attention_layer:run")
            and compiles_on_first_forward(s.params)
        ):
            layouts.setdefault(_layout_tag(s.params), dict(s.params))
    for tag, p in layouts.items():
        out.append(_warm_spec(f"warm/{tag}", {"attention_cells": [p]}))
    return out


def _warm_spec(cid: str, params: dict[str, Any]) -> CellSpec:
    return CellSpec(
        id=cid,
        kind=CellKind.IMPORT,
        target=WARM_TARGET,
        params=params,
        timeout_s=WARM_TIMEOUT_S,
        isolate=True,
    )


def _build_flashinfer_moe(sm: int, out: dict[str, Any]) -> None:
    import importlib

    name = moe_spec_name(sm)
    if name is None:
        out["flashinfer_moe"] = f"no FlashInfer CUTLASS MoE module for sm_{sm}"
        return
    fused = importlib.import_module("flashinfer.jit.fused_moe")
    from flashinfer.jit import build_jit_specs

    spec = getattr(fused, name)()
    aot = spec.aot_path if spec.aot_path.exists() else None  # shipped prebuilt (flashinfer-jit-cache / AOT)
    t0 = time.perf_counter()
    build_jit_specs([spec], verbose=False)
    out["flashinfer_moe"] = {
        "module": spec.name,
        "generator": name,
        "build_s": round(time.perf_counter() - t0, 1),
        "prebuilt": str(aot) if aot else None,
    }


def _warm_attention(cells: list[dict[str, Any]], ctx: ProbeContext) -> list[dict[str, Any]]:
    from probe.probes import attention_layer

    done = []
    for params in cells:
        t0 = time.perf_counter()
        try:
            r = attention_layer.run({**params, "iters": 1, "warmup": 0, "decode_steps": 1}, ctx)
            entry = {"outcome": r["outcome"], "reason": r.get("reason")}
        except Exception as exc:  # recorded; the timed cell will show the failure with its own log
            entry = {"outcome": "error", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}
        entry.update(backend=params.get("backend"), fa_version=params.get("fa_version"),
                     head_dim=params.get("head_dim"), wall_s=round(time.perf_counter() - t0, 1))  # fmt: skip
        done.append(entry)
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
    if params.get("attention_cells"):
        details["attention"] = _warm_attention(list(params["attention_cells"]), ctx)
        timings["attention_s"] = time.perf_counter() - t0
    if params.get("flashinfer_moe"):
        ctx.phase("jit")
        t1 = time.perf_counter()
        _build_flashinfer_moe(sm, details)
        timings["flashinfer_moe_s"] = time.perf_counter() - t1
    timings["total_s"] = time.perf_counter() - t0
    details["caches_after"] = jit.cache_report()
    details["sm"] = sm
    return result("ok", None, timings=timings, details=details)
