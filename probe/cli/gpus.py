"""List the GPU catalog: compute capability, names, family, integrated / unified memory.

Example:  probe gpus            probe gpus --json
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def execute(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from probe.catalog.gpus import catalog

    cat = catalog()
    rows: list[dict[str, Any]] = []
    for g in cat.gpus:
        fam = [f for f, members in cat.families.items() if g.sm in members]
        rows.append(
            {
                "target": f"sm_{g.sm}",
                "cc": g.cc,
                "names": g.names,
                "families": [f"{f}f" for f in sorted(fam)],
                "integrated": g.integrated,
                "unified_memory": g.unified_memory,
                "note": g.note,
            }
        )
    if args.json:
        print(json.dumps({"schema_version": 1, "gpus": rows}, indent=2))
        return 0
    table = [
        [
            r["target"],
            r["cc"],
            ", ".join(r["names"]),
            " ".join(r["families"]) or "-",
            "yes" if r["integrated"] else "",
            r["note"] or "",
        ]
        for r in rows
    ]
    headers = ["target", "CC", "GPUs", "in families", "iGPU", "note"]
    print(tabulate(table, headers=headers, disable_numparse=True))
    return 0
