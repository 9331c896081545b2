#!/usr/bin/env python3
"""Figures of an attention-matrix run from its journals (the README's attention-cell benchmark row).

    python3 benchmarks/attention_stats.py JOURNAL [JOURNAL.warm.jsonl]   # plain or .gz journals

Prints, as JSON: cells by outcome; the median wall time of the ok cells (a warm worker's cell, the JIT
pre-pass having filled the caches) and of all cells; the slowest cells; the pre-pass (``--warm-jit``)
wall and the whole run's wall clock, from the first warm cell's start to the last cell's end.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any


def rows(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    out: dict[str, dict[str, Any]] = {}
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if "outcome" in d:
                out[d["id"]] = d  # a resumed journal: the last row of a cell wins
    return list(out.values())


def _span(cells: list[dict[str, Any]]) -> tuple[float, float] | None:
    times = [
        (datetime.fromisoformat(c["started_at"]).timestamp(), float(c.get("wall_s") or 0.0))
        for c in cells
        if c.get("started_at")
    ]
    if not times:
        return None
    return min(t for t, _ in times), max(t + w for t, w in times)


def stats(cells: list[dict[str, Any]], warm: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [c for c in cells if c["outcome"] == "ok"]
    by: dict[str, int] = {}
    for c in cells:
        by[c["outcome"]] = by.get(c["outcome"], 0) + 1
    out: dict[str, Any] = {
        "cells": len(cells),
        "outcomes": by,
        "median_ok_cell_s": round(statistics.median(c["wall_s"] for c in ok), 2) if ok else None,
        "median_cell_s": round(statistics.median(c["wall_s"] for c in cells), 2) if cells else None,
        "cell_time_s": round(sum(c["wall_s"] for c in cells), 1),
        "slowest": [
            (c["id"], c["outcome"], c["wall_s"]) for c in sorted(cells, key=lambda c: -c["wall_s"])[:5]
        ],
    }
    span = _span(cells)
    warm_span = _span(warm)
    if warm_span:
        out["warm_prepass_s"] = round(warm_span[1] - warm_span[0], 1)
        out["warm_cells"] = [(c["id"], c["outcome"], c["wall_s"]) for c in warm]
    if span:
        start = min(span[0], warm_span[0]) if warm_span else span[0]
        out["matrix_wall_s"] = round(span[1] - start, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("journal", type=Path)
    ap.add_argument("warm", type=Path, nargs="?", help="the --warm-jit pre-pass journal (JOURNAL.warm.jsonl)")
    args = ap.parse_args(argv)
    warm = rows(args.warm) if args.warm and args.warm.exists() else []
    print(json.dumps(stats(rows(args.journal), warm), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
