"""Classify a vLLM / FlashInfer / PyTorch log: outcome, root-cause line, one-line hint, and the rule of
the decision order that decided.

Reads LOGFILE (a regular file; ``-`` for stdin; ``.gz`` is decompressed). At most the first 256 KiB and
the last 1 MiB are classified: a regular file's middle is skipped by seeking, a stream is read in chunks
(up to 1 GiB, then reading stops), so a log of any size takes bounded time and memory. FIFOs, sockets
and devices are refused without being read. The root cause is the earliest line that states a cause
(not vLLM's wrapper lines such as "Engine core initialization failed", nor the CUDA errors echoed after
the first one).

Examples:
  probe classify engine.log
  docker logs vllm 2>&1 | probe classify - --json
  probe classify worker.log --exit-code 137
  probe classify hung.log --timed-out      # a hang has no error line: say so
Exit codes: 0 classified (whatever the outcome), 2 usage error, 6 unreadable, empty, binary or
not-a-regular-file input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from probe.sandbox.classifier import Classification, LogScanner


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


def _read(path: str) -> LogScanner:
    from probe.errors import BadInputError
    from probe.sandbox.classifier import LogScanner
    from probe.sandbox.loginput import open_log

    scanner = LogScanner()
    stream, size = (sys.stdin.buffer, None) if path == "-" else open_log(path)
    try:
        with stream:
            scanner.feed_stream(stream, size)
    except (OSError, EOFError) as exc:
        raise BadInputError(f"cannot read {path}: {exc}")
    return scanner


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _print_text(v: Classification, scanner: LogScanner) -> None:
    print(f"outcome:    {v.outcome.value}")
    where = f"line {v.line_number}: " if v.line_number else ""
    print(f"root cause: {where}{v.root_cause}" if v.root_cause else "root cause: (none found)")
    print(f"rule:       {v.rule}" + (f" (signature {v.signature})" if v.signature else ""))
    if v.hint:
        print(f"hint:       {v.hint}")
    if v.phase:
        print(f"phase:      {v.phase}")
    if v.degraded:
        print(f"degraded:   yes ({'; '.join(v.degraded_reasons)})")
    w = scanner.window
    if w is not None and (w.skipped or not w.complete):
        read = "the first " + _mib(len(w.head)) + (f" and the last {_mib(len(w.tail))}" if w.tail else "")
        cut = "" if w.complete else f" (reading stopped after {_mib(w.total)})"
        print(f"input:      {_mib(w.total)}{cut}; classified {read}")


def execute(args: argparse.Namespace) -> int:
    from probe.errors import BadInputError

    sig, exit_code = _signal_name(args.signal, args.exit_code)
    scanner = _read(args.logfile)
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
        if scanner.window is not None:
            out["input"] = scanner.window.describe()
        print(json.dumps(out, indent=2))
        return 0
    _print_text(v, scanner)
    return 0
