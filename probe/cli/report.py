"""Add a field report of your own: a log (classified as `probe classify` does: outcome, decisive line,
rule) plus what you know, checked like the packaged base and appended to your report file.

Examples:
  probe report add engine.log --gpu sm_121 --vllm 0.33.0 --model Qwen/Qwen3.5-122B-A10B-NVFP4 \\
      --backend flashinfer_cutlass --quant nvfp4 --url https://github.com/vllm-project/vllm/issues/123
  probe report add worker.log.gz --gpu thor --backend marlin --vllm main --citation "CI run 42" -o site.json
  probe report import https://github.com/vllm-project/vllm/issues/34249 -o draft.json
  probe report import saved-thread.txt --url https://github.com/sgl-project/sglang/issues/7249
`import` reads an issue thread (a GitHub issue through its API, or text you saved) and prints a draft
report: the GPUs, versions, backend, outcome and decisive line it found, what it could not find, and
what keeps the draft from being a valid entry. Confirm it against the thread before adding it to a file.
The file (default: the first file of $PROBE_REPORTS, else ./probe-reports.json) is what `probe
recommend --reports FILE`, `probe gate --reports FILE` and `probe reports --reports FILE` read; the
packaged base is never written. Exit: 0 added (or drafted); 2 usage error; 5 the thread could not be
fetched; 6 unreadable log, thread or invalid entry.
"""

from __future__ import annotations

import argparse
from typing import Any

from probe.reports.vocab import KINDS, QUANTS


def configure_parser(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="turn a log into a checked report entry in your report file")
    add.add_argument("log", metavar="LOG", help="the log (.gz read directly)")
    add.add_argument("--gpu", required=True, help="GPU it ran on (sm_121, spark, H100)")
    add.add_argument("--backend", required=True, help="the backend that failed (or ran)")
    add.add_argument("--vllm", help="vLLM version (an exact one gives a version range; 'main' … a note)")
    add.add_argument("--model", help="model (HF id)")
    add.add_argument("--url", help="where others can read it (issue, forum post, CI run)")
    add.add_argument("--citation", help="where it comes from, when there is no URL")
    add.add_argument("--kind", choices=KINDS, help="backend kind (default: from the backend name)")
    add.add_argument("--quant", choices=QUANTS)
    add.add_argument("--fa-version", type=int, choices=(2, 3, 4))
    add.add_argument("--version", action="append", default=[], metavar="PKG=V", help="flashinfer=0.6.7 …")
    add.add_argument(
        "--feature", action="append", default=[], metavar="NAME=VALUE", help="kv_cache_dtype=fp8 …"
    )
    add.add_argument(
        "--works-with", action="append", default=[], metavar="BACKEND", help="what worked instead"
    )
    scope = add.add_mutually_exclusive_group()
    scope.add_argument(
        "--model-specific", action="store_true", default=None, help="applies to this model only"
    )
    scope.add_argument(
        "--general", action="store_true", help="applies to every model on this GPU x backend x quant"
    )
    add.add_argument("-o", "--out", metavar="FILE", help="report file to append to")
    imp = sub.add_parser("import", help="turn an issue thread (URL or saved text) into a draft report")
    imp.add_argument("source", metavar="URL|FILE", help="an https:// thread, or a file holding its text")
    imp.add_argument("--url", help="where the thread can be read, when SOURCE is a saved file")
    imp.add_argument("-o", "--out", metavar="FILE", help="write the draft (JSON) here instead of stdout")


def _pairs(values: list[str], what: str) -> dict[str, str]:
    from probe.errors import OptionError

    out = {}
    for v in values:
        k, sep, x = v.partition("=")
        if not sep or not k or not x:
            raise OptionError(what, f"{v!r}: expected NAME=VALUE")
        out[k.strip()] = x.strip()
    return out


def _features(values: list[str]) -> dict[str, Any]:
    from probe.errors import OptionError
    from probe.reports.vocab import FEATURES, feature_problem

    out: dict[str, Any] = {}
    for k, text in _pairs(values, "feature").items():
        typ = FEATURES.get(k, (None, str))[1]
        value: Any = text
        if typ is bool:
            value = text.lower() in ("1", "true", "yes", "on")
        elif typ is int and text.isdigit():
            value = int(text)
        if (problem := feature_problem(k, value)) is not None:
            raise OptionError("feature", problem)
        out[k] = value
    return out


def _import(args: argparse.Namespace) -> int:
    import json
    import sys

    from probe.decide.report_intake import draft_from_text, draft_problems, thread_text
    from probe.userfile import read_text

    if args.out:
        from probe.cli.flags import output_file

        output_file(args.out, "-o")
    if args.source.startswith(("https://", "http://")):
        text, title = thread_text(args.source)
        source: str | None = args.source
    else:
        text, title, source = read_text(args.source, what="thread"), None, args.url
    draft = draft_from_text(text, source, title)
    doc = {"draft": draft.entry, "missing": draft.missing, "problems": draft_problems(draft.entry)}
    body = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    if args.out:
        from probe.cli.flags import written
        from probe.outfile import open_for_write

        def write() -> None:
            with open_for_write(args.out) as fh:
                fh.write(body)

        written("-o", args.out, write)
    else:
        sys.stdout.write(body)
    e = draft.entry
    gpus = ", ".join(f"sm_{g}" for g in e.get("gpus", [])) or "an unnamed GPU"
    print(
        f"draft {e['id']}: {e['outcome']} on {gpus}"
        f" ({e['kind']}/{e['backend']}); confirm every field against the thread"
        + (f"; fill in: {', '.join(draft.missing)}" if draft.missing else ""),
        file=sys.stderr,
    )
    return 0


def execute(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.action == "import":
        return _import(args)

    from probe.decide.report_entries import LogReport, append_entries, entry_from_log
    from probe.errors import OptionError
    from probe.reports.base import env_report_files

    if not args.url and not args.citation:
        raise OptionError("url", "say where the report can be read", hint="pass --url, or --citation TEXT")
    info = LogReport(
        gpu=args.gpu,
        backend=args.backend,
        vllm=args.vllm,
        model=args.model,
        url=args.url,
        citation=args.citation,
        kind=args.kind,
        quant=args.quant,
        fa_version=args.fa_version,
        versions=_pairs(args.version, "version"),
        features=_features(args.feature),
        works_with=tuple(args.works_with),
        model_specific=True if args.model_specific else (False if args.general else None),
    )
    env = env_report_files()
    out = Path(args.out) if args.out else (env[0] if env else Path("probe-reports.json"))
    from probe.cli.flags import output_file

    output_file(str(out), "-o" if args.out else "$PROBE_REPORTS" if env else "the report file")
    entry = entry_from_log(Path(args.log), info)
    append_entries(out, [entry])
    print(f"added {entry['id']} ({entry['outcome']}: {entry.get('log_line') or entry['symptom']}) to {out}")
    return 0
