"""List the SASS / PTX targets of every compiled extension, with a verdict for each target GPU.

Reads ELF section tables and fatbin headers only (no CUDA, no torch, no GPU needed). Without
PATHs it scans the running interpreter's site-packages; --python scans another environment.

Verdicts: sass (exact SASS), sass-compatible (same major & lower minor, or family), ptx-jit
(PTX the driver JIT-compiles at first load; needs a driver that knows its PTX ISA), none.

Examples:
  probe scan                                  # this environment, local GPU (else the catalog)
  probe scan --target sm_110a --target sm_120 /path/to/site-packages
  probe scan vllm-0.33.0-cp38-abi3-manylinux_2_31_x86_64.whl --kernels --json
  probe scan --python /opt/venv/bin/python --caches --all-targets --format md
  probe scan image.tar --platform linux/arm64  # docker save / OCI tarball or layout folder

Exit codes: 0 all files read, 5 some files could not be read (listed, counted), 2 bad arguments.
"""

# ruff: noqa: PTH100, PTH119, PTH120
# (paths stay str on the scan's hot path: os.path is several times cheaper than pathlib)

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from probe.arch.records import ScanReport, TargetSource, TargetVerdict
    from probe.catalog.gpus import Gpu


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files, folders or .whl files (default: this interpreter's site-packages)",
    )
    p.add_argument("--python", metavar="PY", help="scan the site-packages of another Python interpreter")
    p.add_argument(
        "--caches",
        action="store_true",
        help="also scan the FlashInfer JIT/cubin, torch-extension and Triton caches",
    )
    p.add_argument(
        "--kernels",
        action="store_true",
        help="decompress payloads and list kernel entry points (demangled) per target",
    )
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="GPU",
        help="target GPU (sm_110a, 12.0, H100 ...); repeatable",
    )
    p.add_argument("--all-targets", action="store_true", help="every GPU of the catalog")
    p.add_argument(
        "--platform",
        metavar="OS/ARCH[/VARIANT]",
        help="image inputs: which image of a multi-platform index (e.g. linux/arm64)",
    )
    p.add_argument("--format", choices=("table", "md", "json"), default="table")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument(
        "--verify-with-cuobjdump",
        action="store_true",
        help="also run cuobjdump --list-elf/--list-ptx on each file and report disagreements",
    )
    p.add_argument("--backends", action="store_true", help="add the backend x target table")
    p.add_argument(
        "--all-files", action="store_true", help="table output: also list files without device code"
    )
    p.add_argument("--no-cache", action="store_true", help="ignore and do not update the result cache")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="reader threads (default: up to 4)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the output to FILE instead of stdout")
    p.add_argument(
        "--schema", action="store_true", help="print the JSON Schema of the --json output and exit"
    )


def resolve_targets(args: argparse.Namespace) -> tuple[list[Gpu], TargetSource]:
    from probe.arch.localgpu import local_gpus
    from probe.catalog.gpus import catalog, parse_target

    if args.target and args.all_targets:
        from probe.errors import UsageError

        raise UsageError("--target and --all-targets exclude each other")
    if args.target:
        seen: dict[int, Gpu] = {}
        for t in args.target:
            g = parse_target(t, known_only=True)  # as recommend: a GPU the catalog knows
            seen.setdefault(g.sm, g)
        return list(seen.values()), "argument"
    if not args.all_targets:
        local = local_gpus()
        if local:
            gpus: dict[int, Gpu] = {}
            for lg in local:
                gpus.setdefault(lg.sm, parse_target(f"sm_{lg.sm}"))
            return list(gpus.values()), "local-gpu"
    return list(catalog().gpus), "catalog"


def execute(args: argparse.Namespace) -> int:
    import gc
    import time

    # A header scan allocates ~10 objects per entry and frees none until the end: the cyclic
    # collector's passes over them cost 10-20 % of a 16k-file scan and find nothing. (--kernels
    # allocates and drops far more: leave the collector on there.)
    if not args.kernels:
        gc.disable()

    from probe.errors import EXIT_OK, UsageError

    if args.output:
        from probe.cli.flags import output_file

        output_file(args.output, "-o")  # before the scan: a FIFO or a device is never written
    if args.schema:
        import json

        from probe.arch.records import json_schema

        _write(args.output, json.dumps(json_schema(), indent=1) + "\n")
        return EXIT_OK

    from probe.arch.scanner import build_report, scan_inputs

    if args.json:
        args.format = "json"
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be >= 1")
    gpus, source = resolve_targets(args)

    roots, labels = _roots(args)
    t0 = time.perf_counter()
    found = scan_inputs(
        roots,
        kernels=args.kernels,
        use_cache=not args.no_cache,
        jobs=args.jobs,
        labels=labels,
        platform=args.platform,
    )
    report = build_report(
        found.files,
        gpus,
        source=source,
        per_kernel=args.kernels,
        roots=roots,
        seconds=time.perf_counter() - t0,
        environments=found.environments,
    )
    if args.verify_with_cuobjdump:
        from probe.arch.cuobjdump import verify_files

        report.verify = verify_files(report.files)

    backend_rows = _backend_view(report, gpus) if args.backends else None
    if args.format == "json":  # written piece by piece: a --kernels report can be 100+ MB
        from probe.arch.jsonout import iter_json_lines

        if backend_rows is not None:
            report.backends = backend_rows
        _write(args.output, iter_json_lines(report), "\n")
    else:
        text = render(
            report,
            args.format,
            gpus,
            kernels=args.kernels,
            all_files=args.all_files,
            backend_rows=backend_rows,
        )
        _write(args.output, text)
    from probe.cli.scan_notes import exit_code

    return exit_code(report)  # 5 (partial) with one line on stderr saying why, else 0


def _roots(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The folders / files to scan, and the package label of each cache folder among them."""
    from probe.arch.scanner import cache_roots, default_roots

    labels: dict[str, str] = {}
    if args.paths:
        roots = [os.path.abspath(p) for p in args.paths]
        if args.python:
            roots += default_roots(args.python)
    else:
        roots = default_roots(args.python)
    if args.caches:
        site_dirs = default_roots(args.python) if args.python or not args.paths else []
        for d, label in cache_roots(site_dirs):
            if d not in roots:
                roots.append(d)
            labels[d] = label
    return roots, labels


def _write(output: str | None, text: str | Iterable[str], end: str = "") -> None:
    from probe.errors import UsageError

    parts = [text] if isinstance(text, str) else text
    if output:
        from probe.outfile import open_for_write  # (a regular file or a new one: checked again)

        try:
            with open_for_write(output) as f:
                f.writelines(parts)
                f.write(end)
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror}") from None
    else:
        sys.stdout.writelines(parts)
        sys.stdout.write(end)


def _backend_view(report: ScanReport, gpus: list[Gpu]) -> Any:
    """The backend x target view from ``probe.arch.backend_view.backend_table`` when it is installed."""
    import importlib

    from probe.errors import UsageError

    try:
        mod = importlib.import_module("probe.arch.backend_view")
    except ModuleNotFoundError as exc:
        if exc.name != "probe.arch.backend_view":
            raise
        raise UsageError(
            "--backends: the backend view (probe.arch.backend_view) is not part of this build"
        ) from None
    return mod.backend_table(report, gpus)


def _display_path(path: str, roots: list[str]) -> str:
    for r in sorted(roots, key=len, reverse=True):
        if path.startswith(r.rstrip("/") + "/"):
            base = os.path.basename(r.rstrip("/"))
            return (
                f"{base}/{path[len(r.rstrip('/')) + 1 :]}"
                if base in ("site-packages", "dist-packages")
                else path[len(r.rstrip("/")) + 1 :] or path
            )
    return path


def render(
    report: ScanReport,
    fmt: str,
    gpus: list[Gpu],
    *,
    kernels: bool = False,
    all_files: bool = False,
    backend_rows: Any = None,
) -> str:
    """The report as text: ``json`` (one file / verdict row per line), ``md`` or ``table``."""
    if fmt == "json":
        if backend_rows is not None:
            report.backends = backend_rows
        from probe.arch.jsonout import dumps

        # one file / verdict row per line, each written by json's C encoder
        return dumps(report, lines=True) + "\n"
    md = fmt == "md"
    tablefmt = "github" if md else "simple"
    verdict = {(v.path, t, v.kernel): tv for v in report.verdicts for t, tv in v.targets.items()}
    targets = [g.label for g in gpus]
    out = [_files_block(report, verdict, targets, tablefmt, all_files)]
    if kernels and (block := _kernels_block(report, verdict, targets, tablefmt)):
        out.append(block)
    if backend_rows:
        out.append(
            backend_rows
            if isinstance(backend_rows, str)
            else _titled(md, "Backends", _table(backend_rows, "keys", tablefmt))
        )
    errors = [[_display_path(f.path, report.roots), f.error] for f in report.files if f.error]
    if errors:
        out.append(_titled(md, "Errors", _table(errors, ["file", "error"], tablefmt)))
    if report.verify is not None:
        from probe.cli.scan_notes import render_verify

        out.append(render_verify(report, tablefmt))
    out.append(_summary_line(report))
    out.append(
        "verdicts: sass = exact SASS, sass-compatible = SASS of the same major / family, "
        "ptx-jit = PTX JIT-compiled at first load, none = no kernel image (error 209); "
        "n/m = containers loadable."
    )
    return "\n\n".join(out) + "\n"


_VerdictIndex = dict[tuple[str, str, "str | None"], "TargetVerdict"]


def _table(rows: Any, headers: Any, tablefmt: str) -> str:
    from probe.cli.scan_notes import table

    return table(rows, headers, tablefmt)


def _titled(md: bool, title: str, text: str) -> str:
    return f"## {title}\n\n{text}" if md else text


def _verdict_cell(v: TargetVerdict | None) -> str:
    """``sass``, or ``sass 3/5`` when only some containers hold code for the target."""
    if v is None:
        return "none"
    cell: str = v.verdict
    if (
        v.containers
        and v.containers_loadable is not None
        and v.verdict != "none"
        and v.containers_loadable < v.containers
    ):
        cell += f" {v.containers_loadable}/{v.containers}"
    return cell


def _files_block(
    report: ScanReport, verdict: _VerdictIndex, targets: list[str], tablefmt: str, all_files: bool
) -> str:
    from probe.arch.verdicts import file_codes

    rows = []
    for f in report.files:
        if not f.entries and not all_files:
            continue
        codes = file_codes(f)
        sass = " ".join(c.label for c in codes if c.kind == "sass") or "-"
        ptx = " ".join(c.label for c in codes if c.kind == "ptx") or "-"
        other = sum(1 for e in f.entries if not e.loadable)
        row = [_display_path(f.path, report.roots), f.package or "-", sass, ptx]
        if other:
            row[3] += f" (+{other} not loadable: relocatable/LTO)"
        row += [_verdict_cell(verdict.get((f.path, t, None))) for t in targets]
        rows.append(row)
    if len(rows) > GROUP_ABOVE and not all_files:
        rows = _group_rows(rows)
    if not rows:
        return "no device code found"
    table = _table(rows, ["file", "package", "SASS", "PTX", *targets], tablefmt)
    return _titled(tablefmt == "github", "Device code per file", table)


def _kernels_block(report: ScanReport, verdict: _VerdictIndex, targets: list[str], tablefmt: str) -> str:
    md = tablefmt == "github"
    krows = []
    for f in report.files:
        for k in f.kernels or []:
            name = k.name if md or len(k.name) <= 100 else k.name[:97] + "..."
            row = [_display_path(f.path, report.roots), name, " ".join(k.codes) or "-"]
            for t in targets:
                v = verdict.get((f.path, t, k.name))
                row.append(v.verdict if v else "none")
            krows.append(row)
    if not krows:
        return ""
    return _titled(md, "Kernels", _table(krows, ["file", "kernel", "targets", *targets], tablefmt))


def _summary_line(report: ScanReport) -> str:
    s = report.summary
    src = {"local-gpu": "the local GPU", "argument": "the given targets", "catalog": "the GPU catalog"}
    return (
        f"{s.files} files scanned, {s.with_device_code} with device code ({s.containers} containers, "
        f"{s.entries} entries), {s.errors} with errors"
        + (f", {s.cached} from cache" if s.cached else "")
        + (f", {s.seconds:.2f} s" if s.seconds is not None else "")
        + f"; verdicts for {src.get(report.targets[0].source if report.targets else '', 'no targets')}."
    )


GROUP_ABOVE = 200


def _group_rows(rows: list[list[str]]) -> list[list[str]]:
    """Many files (e.g. 16k FlashInfer cubins): one row per folder and identical target set."""
    groups: dict[tuple[str, ...], int] = {}
    for r in rows:
        key = (os.path.dirname(r[0]) + "/", *r[1:])
        groups[key] = groups.get(key, 0) + 1
    return [[f"{k[0]} ({n} file{'s' if n > 1 else ''})", *k[1:]] for k, n in groups.items()]
