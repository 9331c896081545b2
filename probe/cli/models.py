"""List the model profiles (shapes, quant formats, aliases) or show one in full.

Examples:  probe models      probe models 122b      probe models ./config.json --json
"""

from __future__ import annotations

import argparse


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="show one model in full")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--tp", type=int, default=1, help="TP degree for the shard shapes shown (default 1)")


def execute(args: argparse.Namespace) -> int:
    import json

    from tabulate import tabulate

    from probe.catalog.models import load_profiles, resolve_model

    if args.model:
        prof = resolve_model(args.model)
        data = prof.to_dict()
        data["moe_shape"] = prof.moe_shape(args.tp)
        data["attention_shape"] = prof.attention_shape(args.tp)
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
