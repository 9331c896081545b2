"""Render a matrix or a merged fleet: terminal table, Markdown, JUnit XML or a single-file HTML page.

Examples:
  probe show matrix.json
  probe show matrix.json --format html -o matrix.html
  probe show fleet.json --format md
  probe show --index matrices/ -o matrices/README.md      (the published-matrices index)
"""

from __future__ import annotations

import argparse
import sys


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("matrix", nargs="?", help="matrix or fleet JSON file")
    p.add_argument(
        "--format",
        choices=("table", "md", "junit", "html", "json"),
        default="table",
        help="output format (default: table)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--index", metavar="DIR", help="write the index of all matrices under DIR instead")


def execute(args: argparse.Namespace) -> int:
    from collections.abc import Iterable
    from pathlib import Path

    from probe.cli.flags import output_file, written
    from probe.errors import UsageError
    from probe.matrix.io import iter_document, load_document, write_text_atomic

    if args.output:
        output_file(args.output, "-o")
    text: str | Iterable[str]
    if args.index:
        from probe.matrix.index import build_index

        root = Path(args.index)
        if not root.is_dir():
            raise UsageError(f"{root}: not a folder")
        text = build_index(root)
    else:
        if not args.matrix:
            raise UsageError("give a matrix file (or --index DIR)")
        doc = load_document(args.matrix)
        if args.format == "table":
            from probe.matrix.render_text import render_table

            text = render_table(doc)
        elif args.format == "md":
            from probe.matrix.render_text import render_markdown

            text = render_markdown(doc)
        elif args.format == "junit":
            from probe.matrix.render_junit import iter_junit

            text = iter_junit(doc)
        elif args.format == "html":
            from probe.matrix.render_html import render_html

            text = render_html(doc)
        else:
            text = iter_document(doc)
    if args.output:
        written("-o", args.output, lambda: write_text_atomic(args.output, text))
    else:
        sys.stdout.writelines([text] if isinstance(text, str) else text)
    return 0
