"""Classify a vLLM / FlashInfer / PyTorch log: outcome, root-cause line and a one-line hint.

Reads LOGFILE (``-`` for stdin; ``.gz`` is decompressed) as a stream, so logs of any size work in
bounded memory. The root cause is the earliest decisive line (not vLLM's wrapper lines such as
"Engine core initialization failed", nor the CUDA errors echoed after the first one).

Examples:
  probe classify engine.log
  docker logs vllm 2>&1 | probe classify - --json
  probe classify worker.log --exit-code 137
Exit codes: 0 classified (whatever the outcome), 2 usage error, 6 unreadable, empty or binary input.
"""

from __future__ import annotations

import argparse
import json
import sys


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("logfile", metavar="LOGFILE", help="log file to read, or - for stdin")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.add_argument(
        "--exit-code",
        type=int,
        default=None,
        metavar="N",
        help="the process's exit status, if known (shell style 128+N means signal N)",
    )
    p.add_argument(
        "--signal", default=None, metavar="NAME", help="the signal that killed the process, e.g. SIGSEGV"
    )
    p.add_argument("--timed-out", action="store_true", help="the process was killed for hanging")


def _signal_name(value: str | None, exit_code: int | None) -> tuple[str | None, int | None]:
    import signal as _signal

    from probe.errors import UsageError

    if value:
        name = value.upper() if value.upper().startswith("SIG") else f"SIG{value.upper()}"
        if value.isdigit():
            try:
                name = _signal.Signals(int(value)).name
            except ValueError:
                raise UsageError(f"unknown signal number {value}")
        elif name not in _signal.Signals.__members__:
            raise UsageError(f"unknown signal {value!r}", hint="use a name such as SIGSEGV or a number")
        return name, exit_code
    if exit_code is not None and (exit_code < 0 or 128 < exit_code < 128 + 65):
        num = -exit_code if exit_code < 0 else exit_code - 128
        try:
            return _signal.Signals(num).name, exit_code
        except ValueError:
            return None, exit_code
    return None, exit_code


def execute(args: argparse.Namespace) -> int:
    import gzip

    from probe.errors import BadInputError
    from probe.sandbox.classify import LogScanner

    sig, exit_code = _signal_name(args.signal, args.exit_code)
    scanner = LogScanner()
    try:
        if args.logfile == "-":
            scanner.feed_stream(sys.stdin.buffer)
        else:
            opener = gzip.open if args.logfile.endswith(".gz") else open
            with opener(args.logfile, "rb") as f:
                scanner.feed_stream(f)
    except FileNotFoundError:
        raise BadInputError(f"no such log file: {args.logfile}")
    except (OSError, EOFError) as exc:
        raise BadInputError(f"cannot read {args.logfile}: {exc}")
    known = sig is not None or exit_code is not None or args.timed_out
    if scanner.looks_binary:
        raise BadInputError(
            f"{args.logfile} does not look like a text log (binary data)",
            hint="pass the log text (decompress or decode it first; .gz files are read directly)",
        )
    if scanner.text_lines == 0 and not known:
        raise BadInputError(
            f"{args.logfile} is empty: there is nothing to classify",
            hint="pass the captured output, or --exit-code/--signal/--timed-out if that is all you know",
        )
    v = scanner.verdict(
        exit_code=exit_code,
        signal_name=sig,
        timed_out=args.timed_out,
        completed=False if known and (sig or args.timed_out or exit_code) else None,
    )
    if args.json:
        out = v.as_dict()
        out["lines"] = v.lines
        print(json.dumps(out, indent=2))
        return 0
    print(f"outcome:    {v.outcome.value}")
    where = f"line {v.line_number}: " if v.line_number else ""
    print(f"root cause: {where}{v.root_cause}" if v.root_cause else "root cause: (none found)")
    if v.hint:
        print(f"hint:       {v.hint}")
    if v.phase:
        print(f"phase:      {v.phase}")
    if v.degraded:
        print(f"degraded:   yes ({'; '.join(v.degraded_reasons)})")
    return 0
