"""Merge matrices from several GPUs / images into one fleet document (one column per GPU + image;
runs of the same GPU and image are unioned into one column).

Example:  probe merge thor.json h100.json spark.json -o fleet.json && probe show fleet.json --format html
"""

from __future__ import annotations

import argparse


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("matrices", nargs="+", metavar="MATRIX", help="matrix or fleet JSON files")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="fleet JSON to write")


def execute(args: argparse.Namespace) -> int:
    from probe.cli.flags import output_file, written
    from probe.matrix.fleet import merge
    from probe.matrix.io import load_document, write_document

    output_file(args.output, "-o")
    fleet = merge([load_document(p) for p in args.matrices])
    written("-o", args.output, lambda: write_document(fleet, args.output))
    n = len(fleet.columns)
    print(f"probe merge: {n} column{'s' if n != 1 else ''} -> {args.output}: " + "; ".join(fleet.columns))
    return 0
