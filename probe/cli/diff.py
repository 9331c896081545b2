"""What changed between two image builds: cells that flipped, arches gained / lost per file and
kernel, versions changed, recommendations changed.

Example:  probe diff old.json new.json [--models 122b,35b] [--json]
Exit: 0 (differences or not), 3 nothing to compare, 6 bad matrix file.
"""

from __future__ import annotations

import argparse


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", help="baseline matrix")
    p.add_argument("new", help="current matrix")
    p.add_argument(
        "--models",
        help="comma-separated models to compare recommendations for (default: the models the matrices cover)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def execute(args: argparse.Namespace) -> int:
    from probe.decide.compare import compare, dumps
    from probe.errors import NothingToCompareError
    from probe.matrix.io import load_matrix

    old, new = load_matrix(args.old), load_matrix(args.new)
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    if models:
        from probe.modelcfg.resolve import resolve_model

        models = [resolve_model(m).name for m in models]
    cmp = compare(old, new, models=models)
    if cmp.common_cells == 0 and not (old.static and new.static) and not cmp.recommendations:
        raise NothingToCompareError(f"{args.old} and {args.new} share no cells and no static section")
    if args.json:
        print(dumps(cmp), end="")
        return 0
    print(f"probe diff: {old.column_label()} -> {new.column_label()}")
    print(f"cells: {cmp.common_cells} in common ({cmp.baseline_cells} old, {cmp.current_cells} new)")
    for ch in cmp.cells:
        tag = "REGRESSED" if ch.regression else ("fixed" if ch.fixed else "changed")
        print(
            f"  {tag:9} {ch.id}: {ch.old or 'absent'} -> {ch.new or 'absent'}"
            + (f"  ({ch.root_cause})" if ch.root_cause else "")
        )
    print(f"arches: {len(cmp.arches)} file/kernel entries changed")
    for a in cmp.arches:
        name = a.path + (f" :: {a.kernel}" if a.kernel else "")
        print(f"  {name}: " + " ".join([*(f"+{x}" for x in a.gained), *(f"-{x}" for x in a.lost)]))
    print(f"versions: {len(cmp.versions)} changed")
    for k, (o, n) in cmp.versions.items():
        print(f"  {k}: {o} -> {n}")
    print("recommendations:")
    for r in cmp.recommendations:
        same = r.pair("old") == r.pair("new")
        extra = f" ({r.slowdown:+.1%} time)" if r.slowdown is not None else ""
        tag = "unchanged " if same else ""
        print(f"  {r.model}: {tag}{r.pair('old') or 'none'} -> {r.pair('new') or 'none'}{extra}")
    return 0
