"""List the model profiles (shapes, quant formats, aliases) or show one in full.

Examples:  probe models      probe models 122b      probe models ./config.json --layers

``--layers`` shows how probe read the model, per distinct layer type: each attention kind (head
size, heads / KV heads, sliding window, sinks, MLA, sparse) with its layer count, the layers
without a KV cache, the routed experts and the quant scheme (the experts' own one apart).
"""

from __future__ import annotations

import argparse
from typing import Any


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="show one model in full")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--tp", type=int, default=1, help="TP degree for the shard shapes shown (default 1)")
    p.add_argument(
        "--layers",
        action="store_true",
        help="show the per-layer reading of MODEL (attention kinds, KV-less layers, experts, quant) as text",
    )


def execute(args: argparse.Namespace) -> int:
    import json

    from tabulate import tabulate

    from probe.catalog.models import load_profiles
    from probe.modelcfg.layer_spec import layer_spec
    from probe.modelcfg.resolve import resolve_model

    if args.model:
        prof = resolve_model(args.model)
        if args.layers:
            print(layers_text(prof))
            return 0
        data = prof.to_dict()
        data["moe_shape"] = prof.moe_shape(args.tp)
        data["attention_shape"] = prof.attention_shape(args.tp)
        data["layers"] = layer_spec(prof)
        print(json.dumps(data, indent=1))
        return 0
    profs = load_profiles()
    if args.json:
        print(json.dumps({"schema_version": 1, "models": [p.to_dict() for p in profs]}, indent=1))
        return 0
    rows = []
    for p in profs:
        moe = p.moe
        rows.append(
            [
                p.name,
                ", ".join(p.aliases),
                f"{moe.experts}/{moe.top_k}" if moe else "dense",
                p.hidden_size,
                moe.intermediate if moe else (p.dense_intermediate or ""),
                f"{p.num_attention_heads}/{p.num_key_value_heads}x{p.head_dim}" + (" MLA" if p.mla else ""),
                f"{p.attention_layers}/{p.num_hidden_layers}",
                p.quant,
            ]
        )
    print(
        tabulate(
            rows,
            headers=[
                "model",
                "aliases",
                "experts/top-k",
                "hidden",
                "moe inter.",
                "heads/kv x dim",
                "attn/layers",
                "quant",
            ],
            disable_numparse=True,
        )
    )
    return 0


def layers_text(prof: Any) -> str:
    """The per-layer reading of one profile as a few lines of text (``probe models X --layers``)."""
    from tabulate import tabulate

    from probe.modelcfg.layer_spec import moe_spec

    kinds = prof.layer_kinds()
    head = f"{prof.name}: {prof.model_type}" + (f" / {prof.text_model_type}" if prof.text_model_type else "")
    lines = [
        f"{head}, {prof.num_hidden_layers} layers ({', '.join(prof.architectures) or 'no architecture'})"
    ]
    lines.append(f"read from: {prof.origin}")
    rows = [
        [k.layers, k.label, k.head_size, k.num_heads, k.num_kv_heads, k.sliding_window or "-",
         "yes" if k.sink else "-", "yes" if k.mla else "-", "yes" if k.sparse else "-"]
        for k in kinds
    ]  # fmt: skip
    heads = ["layers", "attention kind", "head size", "heads", "kv heads", "window", "sinks", "MLA", "sparse"]
    lines.append(
        tabulate(rows, headers=heads, disable_numparse=True)
        if rows
        else "attention: none via vLLM's selector"
    )
    if prof.mixers():
        others = ", ".join(f"{n} x {kind}" for kind, n in prof.mixers())
        lines.append(f"layers outside the attention selector (state-space, linear, own attention): {others}")
    for m in moe_spec(prof):
        r = m["routing"]
        route = f"{r['scoring_func']}{', renormalized' if r['renormalize'] else ''}"
        route += f", {r['num_expert_group']} expert groups" if r["num_expert_group"] else ""
        route += ", score bias" if r["has_e_score_bias"] else ""
        gated = "gated" if m["gated"] else "not gated"
        shape = f"{m['experts']} experts, top-{m['top_k']}, hidden {m['hidden']}"
        shape += f", intermediate {m['intermediate']}"
        lines.append(
            f"experts: {m['layers']} layers x {shape}, {m['activation']} ({gated}), routing {route}, "
            f"quant {m['scheme']}"
        )
    qs = prof.quant_scheme
    if qs is not None:
        lines.append(
            f"quant: vLLM method {qs.method or 'none'}, linear layers {qs.linear}, "
            f"experts {qs.experts or '-'}, kv cache {qs.kv_cache or 'auto'}; probe reads it as {prof.quant}"
        )
    else:
        lines.append(f"quant: {prof.quant} (formats: {', '.join(prof.quant_formats)})")
    return "\n".join(lines)
