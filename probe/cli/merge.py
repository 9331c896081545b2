"""Merge matrices from several GPUs / images into one fleet document (one column per matrix).

Example:  probe merge thor.json h100.json spark.json -o fleet.json && probe show fleet.json --format html
"""

from __future__ import annotations

import argparse


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("matrices", nargs="+", metavar="MATRIX", help="matrix or fleet JSON files")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="fleet JSON to write")


def execute(args: argparse.Namespace) -> int:
    from probe.matrix.build import write_matrix
    from probe.matrix.io import load_document
    from probe.matrix.merge import merge

    fleet = merge([load_document(p) for p in args.matrices])
    write_matrix(fleet, args.output)
    print(f"probe merge: {len(fleet.columns)} columns -> {args.output}: " + "; ".join(fleet.columns))
    return 0
