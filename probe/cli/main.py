"""Entry point of the ``probe`` command: parse, dispatch to one verb module, map errors to exit codes."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from probe import __version__
from probe.cli.flags import flag_error
from probe.errors import EXIT_INFRA, EXIT_INTERRUPTED, OptionError, ProbeError

# Order = order in --help. Each name is a module probe.cli.<name> defining configure_parser(p)
# and execute(args) -> int. Only the module of the verb being run is imported, so start-up stays
# fast (`probe recommend` must answer in well under 0.2 s as a whole process).
VERBS: dict[str, str] = {
    "scan": "list SASS/PTX targets of compiled extensions, per file and per kernel, with verdicts per GPU",
    "run": "run the probe cells in sandboxed children and write the journal + matrix",
    "classify": "classify a crash log: outcome, root-cause line, hint",
    "show": "render a matrix (table, Markdown, JUnit XML, HTML) or the matrices/ index",
    "merge": "merge matrices of several GPUs / images into one fleet view",
    "diff": "show what changed between two matrices",
    "gate": "fail CI when the current matrix regressed against a baseline",
    "recommend": "print the vLLM flags that work for a model on a GPU, with the evidence",
    "models": "list model profiles, or show one (name, alias, config.json, cached HF id)",
    "gpus": "list the GPU catalog (compute capabilities, families, iGPU rules)",
    "reports": "list the field reports that apply to a GPU / backend / versions (cited, version-ranged)",
    "report": "add a field report of your own: a log + what you know -> a checked entry in your file",
    "predict": "ask the installed vLLM's own selection code which backends it accepts, per GPU x model",
}


def _chosen_verb(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if arg in VERBS:
            return arg
        if not arg.startswith("-"):
            return None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser; with ``only``, just that verb (``""``: every verb listed, none configured)."""
    parser = argparse.ArgumentParser(
        prog="probe",
        description="Which vLLM / FlashInfer kernel backends load and run on which NVIDIA GPU.",
        epilog="Exit codes: 0 ok, 1 regression (gate), 2 usage error, 3 nothing to compare, "
        "4 probe infrastructure failed, 5 partial result, 6 invalid input file, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"probe {__version__}")
    _global_flags(parser, default=True)
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for name, help_text in VERBS.items():
        if only is not None and name != only:
            if not only:  # no verb given: every verb is listed in the help
                sub.add_parser(name, help=help_text)
            continue  # (a verb given: the others' parsers are never used)
        module = importlib.import_module(f"probe.cli.{name}")
        p = sub.add_parser(
            name,
            help=help_text,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.configure_parser(p)
        _global_flags(p, default=False)
        p.set_defaults(_module=module)
    return parser


def _global_flags(p: argparse.ArgumentParser, *, default: bool) -> None:
    """``-v`` / ``--debug``, before the verb (``probe -v scan``) or after it (``probe scan -v``): the
    verb's copies leave the value alone unless given."""
    keep = argparse.SUPPRESS
    p.add_argument(
        "-v", "--verbose", action="count", default=0 if default else keep, help="more log output (-vv: debug)"
    )
    p.add_argument(
        "--debug",
        action="store_true",
        default=False if default else keep,
        help="show Python tracebacks for errors",
    )


def main(argv: Sequence[str] | None = None) -> int:
    from probe.textsafe import install

    restore = install()  # every line printed, logged or reported: no terminal controls from inputs
    try:
        return _main(argv)
    finally:
        restore()


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = _chosen_verb(argv)
    parser = build_parser(only=verb) if verb else build_parser(only="")
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="probe: %(levelname)s: %(message)s", stream=sys.stderr)
    if args.verb is None:
        parser.print_help()
        return 0
    try:
        return int(args._module.execute(args))
    except ProbeError as exc:
        if args.debug:
            raise
        shown = flag_error(exc) if isinstance(exc, OptionError) else exc  # the core names settings
        print(f"probe {args.verb}: error: {shown}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"probe {args.verb}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into `head` etc.: exit quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug in probe: say so plainly, keep the traceback behind --debug
        if args.debug:
            raise
        print(
            f"probe {args.verb}: internal error: {type(exc).__name__}: {exc}\n"
            "  (this is a bug in probe; re-run with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INFRA


if __name__ == "__main__":
    raise SystemExit(main())
