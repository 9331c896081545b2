#!/usr/bin/env python3
"""Plan files for FlashInfer, FA4 and JIT-built kernels: cells the default `probe run` plan leaves out.

    python3 scripts/plan_flashinfer_cells.py --out PLANS      # writes PLANS/<name>.json, prints the counts

Then, on the GPU (an image with torch, vLLM and FlashInfer; see ``docs/scripts.md``)::

    probe run --plan-file PLANS/attention.json -j 2 --warm-jit --journal attention.jsonl -o attention.json
    probe run --plan-file PLANS/moe.json -j 2 --warm-jit --journal moe.jsonl -o moe.json
    probe run --plan-file PLANS/engine-flashinfer-attention.json --journal engine-fa.jsonl
    probe run --plan-file PLANS/engine-flashinfer-moe.json --journal engine-fm.jsonl

The plans (``nvidia-h100-sm90-vllm-0.26.0.json`` was measured from the first four):

- ``attention``: attention-layer cells (``probe.probes.attention_layer``, one warm worker per backend) of
  TRITON_ATTN, FLASH_ATTN FA2/FA3/FA4, FLEX_ATTENTION and FLASHINFER at the head layouts of Nemotron-3-Nano,
  gpt-oss-120b (sinks, with and without its sliding window) and Qwen3.5-122B; FA2 last (on a GPU its
  wheel has no SASS for, the driver JIT-compiles its PTX for minutes);
- ``moe``: every ``flashinfer_*`` MoE backend x quant at the gpt-oss-120b (TP=1) and DeepSeek-V3 (one
  TP=8 shard) shapes, with a 1200 s limit (FlashInfer's CUTLASS MoE module may be JIT-compiled);
- ``engine-flashinfer-attention``: 2-layer engines with FLASHINFER (FLASHINFER_MLA) attention and vLLM's
  own MoE choice; ``engine-flashinfer-moe``: engines with ``flashinfer_cutlass`` MoE;
- ``mla``: the MLA attention backends through a 1-layer DeepSeek-V3 engine each.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from probe.catalog.backends import catalog, matching
from probe.modelcfg.resolve import resolve_model
from probe.probes.engine import ENGINE_ENV
from probe.probes.moe import QUANTS, estimate_mem_gib

LAYER_TARGET = "probe.probes.attention_layer:run"
ATTN_MODELS = ("nano", "120b", "122b")  # dense-attention head layouts of the default models
MLA_MODEL = "deepseek-v3"
MOE_SHAPES = (("120b", 1), (MLA_MODEL, 8))  # gpt-oss-120b at TP=1, DeepSeek-V3 per TP=8 shard
JIT_TIMEOUT_S = 1200.0
# (model, moe backend, attention backend) beyond the gpt-oss-120b / DeepSeek-V3 pairs: FLASHINFER attention
# in engines that can run it (no sinks, no MLA), flashinfer_cutlass MoE on an unquantized model
EXTRA_ENGINES = (
    ("qwen3-30b-a3b", "auto", "FLASHINFER"),
    ("nemotron-3-nano-30b-a3b", "auto", "FLASHINFER"),
    ("qwen3.5-122b-a10b", "auto", "FLASHINFER"),
    ("qwen3-30b-a3b", "flashinfer_cutlass", "FLASHINFER"),
    ("qwen3-30b-a3b", "flashinfer_cutlass", "auto"),
)


def layer_backends(mla: bool) -> list[str]:
    """The attention backends of the backend catalog (MLA ones, or the others)."""
    return list(dict.fromkeys(b.name for b in catalog().records("attention") if b.mla == mla))


def flashinfer_moe_backends() -> list[str]:
    """FlashInfer's MoE backends one GPU can use (the backend catalog's ``flashinfer_*`` records)."""
    return [b.name for b in matching("moe", "flashinfer_*") if b.vllm.single_gpu_cuda]


def _cell(
    cid: str, kind: str, target: str, params: dict[str, Any], timeout_s: float, **kw: Any
) -> dict[str, Any]:
    return {"id": cid, "kind": kind, "target": target, "params": params, "timeout_s": timeout_s, **kw}


def _layer_cell(m: Any, backend: str, fa: int | None, window: int | None) -> dict[str, Any]:
    a = m.attention_shape(1)
    sinks = bool((m.hybrid or {}).get("attention_sinks"))
    params = {"backend": backend, "fa_version": fa, "num_heads": a["num_heads"],
              "num_kv_heads": a["num_kv_heads"], "head_dim": a["head_dim"], "hidden": m.hidden_size,
              "model": m.slug, "mla": False, "sinks": sinks, "sliding_window": window,
              "mem_gib": 4.0}  # fmt: skip
    tag = (f"/fa{fa}" if fa else "") + f"/h={a['num_heads']}/kv={a['num_kv_heads']}/d={a['head_dim']}"
    tag += ("/sinks" if sinks else "") + (f"/sw={window}" if window else "")
    # FLASHINFER may JIT-compile for minutes (the --warm-jit pre-pass should have done it);
    # the others compile at most Triton / CuTe-DSL kernels
    limit = 600.0 if backend == "FLASHINFER" else 180.0
    env = {"PROBE_ATTN_BACKEND": backend}  # one warm worker per backend: no state crosses backends
    return _cell(f"attention/{backend}{tag}", "attention", LAYER_TARGET, params, limit, env=env)


def attention_cells() -> list[dict[str, Any]]:
    """Every backend x FA version x head layout (gpt-oss also with its sliding window); FA2 last."""
    out = []
    for name in ATTN_MODELS:
        m = resolve_model(name)
        hybrid = m.hybrid or {}
        windows = [None] + ([int(hybrid["sliding_window"])] if hybrid.get("sliding_window") else [])
        for b in layer_backends(mla=False):
            for fa in (2, 3, 4) if b == "FLASH_ATTN" else (None,):
                out += [_layer_cell(m, b, fa, sw) for sw in windows]
    return sorted(out, key=lambda c: c["params"]["fa_version"] == 2)  # stable: FA2 last


def moe_cells() -> list[dict[str, Any]]:
    out = []
    for name, tp in MOE_SHAPES:
        m = resolve_model(name)
        s = m.moe_shape(tp)
        if s is None:
            raise SystemExit(f"{name} has no MoE layers")
        e, h, i, k = s["experts"], s["hidden"], s["intermediate"], s["top_k"]
        for b in flashinfer_moe_backends():
            for q in QUANTS:
                params = {"backend": b, "quant": q, "experts": e, "hidden": h, "intermediate": i, "top_k": k,
                          "tp": tp, "model": m.slug, "batch_sizes": [1, 64], "matrix": "model",
                          "mem_gib": estimate_mem_gib(e, h, i)}  # fmt: skip
                cid = f"moe/{b}/{q}/E={e}/H={h}/I={i}/k={k}/tp={tp}"
                out.append(_cell(cid, "moe", "probe.probes.moe:run", params, JIT_TIMEOUT_S))
    return out


def engine_cell(model: str, quant: str, moe_b: str, attn_b: str) -> dict[str, Any]:
    """A whole 2-layer, dummy-weight engine with this MoE x attention pair."""
    params = {"model": model, "moe_backend": moe_b, "attention_backend": attn_b, "fa_version": None,
              "quant": quant, "layers": 2, "mem_gib": 40.0, "exclusive": True}  # fmt: skip
    return _cell(f"engine/{model}/{quant}/{moe_b}+{attn_b}", "engine", "probe.probes.engine:run", params,
                 900.0, env=dict(ENGINE_ENV), isolate=True)  # fmt: skip


def engine_cells() -> list[dict[str, Any]]:
    """FLASHINFER attention and flashinfer_cutlass MoE in whole engines."""
    out = []
    for name in ("120b", MLA_MODEL):
        m = resolve_model(name)
        for moe_b, attn_b in (("flashinfer_cutlass", "FLASHINFER"), ("auto", "FLASHINFER"),
                              ("flashinfer_cutlass", "auto")):  # fmt: skip
            if m.mla is not None and attn_b == "FLASHINFER":
                attn_b = "FLASHINFER_MLA"  # an MLA model takes the MLA variant (refused before sm_100)
            out.append(engine_cell(m.slug, m.quant, moe_b, attn_b))
    for slug, moe_b, attn_b in EXTRA_ENGINES:
        out.append(engine_cell(slug, resolve_model(slug).quant, moe_b, attn_b))
    return out


def mla_cells() -> list[dict[str, Any]]:
    m = resolve_model(MLA_MODEL)
    a = m.attention_shape(1)
    out = []
    for b in layer_backends(mla=True):
        params = {"backend": b, "fa_version": None, "num_heads": a["num_heads"],
                  "num_kv_heads": a["num_kv_heads"], "head_dim": a["head_dim"], "hidden": m.hidden_size,
                  "model": m.slug, "mla": True, "mem_gib": 30.0, "exclusive": True}  # fmt: skip
        cid = f"attention/{b}/h={a['num_heads']}/kv={a['num_kv_heads']}/d={a['head_dim']}/mla"
        out.append(_cell(cid, "attention", "probe.probes.engine:run_attention", params, 600.0,
                         env=dict(ENGINE_ENV), isolate=True))  # fmt: skip
    return out


def plans() -> dict[str, list[dict[str, Any]]]:
    engines = engine_cells()
    auto = [c for c in engines if "/auto+" in c["id"]]  # vLLM's own MoE choice, FLASHINFER(_MLA) attention
    return {
        "attention": attention_cells(),
        "moe": moe_cells(),
        "engine-flashinfer-attention": auto,
        "engine-flashinfer-moe": [c for c in engines if c not in auto],
        "mla": mla_cells(),
    }


def write_plans(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, cells in plans().items():
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(cells, indent=1) + "\n", encoding="utf-8")
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="plan_flashinfer_cells.py",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", type=Path, required=True, help="folder for the plan files")
    args = ap.parse_args(argv)
    for name, path in write_plans(args.out).items():
        print(f"{name}: {len(json.loads(path.read_text(encoding='utf-8')))} cells -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
