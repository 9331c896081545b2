"""List the field reports that apply: cited public reports of what broke (or worked) for a backend
on a GPU, with the versions they were seen on, the fix or workaround, and the link.

Examples:
  probe reports --gpu sm_121                      (the DGX Spark list: open failures first, per backend)
  probe reports --gpu sm_120 --backend cutlass --vllm 0.33.0
  probe reports --kind attention --gpu B200 --json
  probe reports --coverage --format md            (GPU x backend family: number of reports; README)
  probe reports --format osv > base.osv.json      (the base as OSV records; --reports reads them back)
  probe reports --from-run matrix.json -o site-reports.json --url https://ci.example/run/42
With --vllm (and --flashinfer / --torch), only the reports whose version range includes those versions
are listed: a report fixed in an older release is left out; an open one seen only on older versions is
listed as "seen up to X". Extra report files: --reports FILE (repeatable) and $PROBE_REPORTS.
Exit: 0 listed (also when none applies); 2 usage error; 6 invalid report / run file.
"""

from __future__ import annotations

import argparse

from probe.reports.vocab import KINDS, QUANTS


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", help="GPU (sm_121, 12.1, spark, H100); default: every GPU")
    p.add_argument("--backend", help="backend (marlin, flashinfer_cutlass, FLASH_ATTN, …)")
    p.add_argument("--kind", choices=KINDS, help="backend kind")
    p.add_argument("--quant", choices=QUANTS, help="quant format (reports of any quant are listed too)")
    p.add_argument("--model", help="model name: model-specific reports of other models are left out")
    p.add_argument("--vllm", metavar="V", help="vLLM version: only reports whose range includes it")
    p.add_argument("--flashinfer", metavar="V", help="FlashInfer version (as --vllm)")
    p.add_argument("--torch", metavar="V", help="torch version (as --vllm)")
    p.add_argument("--reports", action="append", metavar="FILE", help="extra report file (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--coverage", action="store_true", help="the coverage table instead of the list")
    p.add_argument(
        "--format",
        choices=("text", "md", "osv"),
        default="text",
        help="--coverage: text or Markdown; osv: the reports that apply as OSV JSON records (with the GPU, "
        "backend, quant and conditions in database_specific; --reports reads such a file back)",
    )
    p.add_argument(
        "--from-run", metavar="RUN", help="export a matrix / fleet / journal's failures as reports"
    )
    p.add_argument("--url", help="--from-run: where other sites can see the run (else a citation is written)")
    # --from-run also takes --gpu / --vllm / --flashinfer / --torch for a journal that does not record them
    p.add_argument("-o", "--out", metavar="FILE", help="--from-run: append the reports to FILE (else print)")


def _files(args: argparse.Namespace) -> list[str]:
    from probe.reports.base import env_report_files

    return [*(args.reports or []), *map(str, env_report_files())]


def _from_run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from probe.catalog.gpus import parse_target
    from probe.decide.report_entries import append_entries, entries_from_run

    if args.out:
        from probe.cli.flags import output_file

        output_file(args.out, "-o")  # a regular file or a new one, in a folder that exists
    sm = parse_target(args.gpu).sm if args.gpu else None
    versions = {
        k: v for k, v in (("vllm", args.vllm), ("flashinfer", args.flashinfer), ("torch", args.torch)) if v
    }
    entries = entries_from_run(Path(args.from_run), url=args.url, gpu_sm=sm, versions=versions)
    if args.out:
        n = append_entries(Path(args.out), entries)
        print(f"{n} report(s) appended to {args.out}")
    else:
        print(json.dumps({"schema_version": 3, "reports": entries}, indent=1))
    return 0


def execute(args: argparse.Namespace) -> int:
    import json

    from probe.catalog.gpus import parse_target
    from probe.decide.report_views import Listed, as_json, coverage_markdown, coverage_text, render_text
    from probe.reports.base import load_reports, matches
    from probe.reports.ranges import version_status

    if args.from_run:
        return _from_run(args)
    reports = load_reports(_files(args))
    if args.coverage:
        print(coverage_markdown(reports) if args.format == "md" else coverage_text(reports), end="")
        return 0
    sm = parse_target(args.gpu).sm if args.gpu else None
    asked = {
        k: v for k, v in (("vllm", args.vllm), ("flashinfer", args.flashinfer), ("torch", args.torch)) if v
    }
    items = []
    for r in reports:
        if not matches(
            r, gpu_sm=sm, backend=args.backend, kind=args.kind, quant=args.quant, model=args.model
        ):
            continue
        status = version_status(r, asked) if asked else None
        if status is None or status.applies:
            items += [Listed(g, r, status) for g in r.gpus if sm is None or g == sm]
    if args.format == "osv":
        from probe.reports.osv import osv_document

        unique = list({id(i.report): i.report for i in items}.values())  # a report once, not per GPU
        print(json.dumps(osv_document(unique), indent=1))
    elif args.json:
        print(json.dumps(as_json(items), indent=1))
    else:
        print(render_text(items, ", ".join(f"{k} {v}" for k, v in asked.items()) or None), end="")
    return 0
