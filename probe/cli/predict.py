"""Ask the installed vLLM's own selection code which backends it accepts, per GPU x model (no GPU needed).

In a sandboxed child that imports the image's vLLM (``--python``), the CUDA platform is faked to
each target GPU and vLLM's own checks are run: every attention backend's validation
(``get_attn_backend_cls``: head size, dtype, kv-cache dtype, block size, sinks, MLA, sparse,
sliding window, compute capability) and every MoE backend's oracle (``select_*_moe_backend``:
the experts classes' device / quant scheme / activation / parallel-config checks) at the
model's shapes and TP 1/2/4, plus what ``auto`` picks. Refusals are vLLM's own messages, with the
file:line of the check. The output is a matrix of ``predicted`` cells (basis ``vllm_check``) that
``probe show`` renders and ``probe recommend`` reads.

Examples:
  probe predict -o predicted.json                              # this Python's vLLM, whole catalog
  probe predict --python ~/.cache/probe-tests/venv-vllm-0.33.0/bin/python -o matrices/predicted/vllm-0.33.0
  probe predict --target sm_89 --target sm_120 --models 120b,122b --json
  PYTHONPATH=/tmp/site probe predict --python /opt/venv/bin/python --pythonpath /tmp/site -o p.json
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from probe.matrix.schema import Matrix


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--target",
        action="append",
        metavar="SM",
        help="GPU to predict for (sm_90, 12.0, an alias); repeatable; default: the whole catalog",
    )
    p.add_argument(
        "--models",
        metavar="LIST",
        help="comma-separated model profiles / aliases / config.json paths (default: all profiles)",
    )
    p.add_argument(
        "--tp", metavar="LIST", default="1,2,4", help="TP sizes for the MoE checks (default 1,2,4)"
    )
    p.add_argument("--python", metavar="PY", help="interpreter whose vLLM is asked (default: this one)")
    p.add_argument(
        "--pythonpath",
        action="append",
        metavar="DIR",
        default=[],
        help="prepend DIR to the child's PYTHONPATH (e.g. an unpacked vLLM wheel); repeatable",
    )
    p.add_argument("--timeout", type=float, default=900.0, metavar="S", help="child timeout (default 900 s)")
    p.add_argument("--image", metavar="TEXT", help="label for provenance.image (default: the interpreter)")
    p.add_argument("--note", metavar="TEXT", help="extra provenance note (e.g. the command that made it)")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE|DIR",
        help="write the matrix JSON here; a path not ending in .json is a folder that gets one file "
        "per GPU (sm_90.json.gz …), the layout of matrices/predicted/",
    )
    p.add_argument("--json", action="store_true", help="print the matrix JSON on stdout")


def _targets(values: list[str] | None) -> list[Any]:
    from probe.catalog.gpus import catalog, parse_target

    if not values:
        return list(catalog().gpus)
    return [parse_target(v) for v in values]


def _profiles(text: str | None) -> list[Any]:
    from probe.catalog.models import load_profiles
    from probe.modelcfg.resolve import resolve_model

    if not text:
        return list(load_profiles())
    return [resolve_model(t.strip()) for t in text.split(",") if t.strip()]


def _tps(text: str) -> tuple[int, ...]:
    from probe.errors import UsageError

    try:
        tps = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--tp {text!r}: expected comma-separated integers, e.g. 1,2,4")
    if not tps or any(t < 1 for t in tps):
        raise UsageError(f"--tp {text!r}: expected positive integers")
    return tps


def _summary(matrix: Matrix) -> str:
    from collections import Counter

    per: Counter[tuple[int | None, str, str]] = Counter(
        (c.gpu_sm, str(getattr(c.kind, "value", c.kind)), c.outcome.value) for c in matrix.cells
    )
    lines = [f"{'GPU':<8} {'kind':<10} {'ok':>5} {'unsupported':>12} {'skipped':>8}"]
    for sm in sorted({k[0] for k in per}, key=lambda s: s or 0):
        for kind in ("attention", "moe", "import"):
            row = [per[(sm, kind, o)] for o in ("ok", "unsupported", "skipped")]
            if any(row):
                lines.append(
                    f"{('sm_' + str(sm)) if sm else '-':<8} {kind:<10} {row[0]:>5} {row[1]:>12} {row[2]:>8}"
                )
    return "\n".join(lines)


def execute(args: argparse.Namespace) -> int:
    import sys

    from probe.errors import EXIT_PARTIAL
    from probe.matrix.io import write_text_atomic
    from probe.oracle.collect import run_child
    from probe.oracle.queries import plan
    from probe.oracle.to_matrix import build_matrix, compact_json, write_split

    request = plan(_targets(args.target), _profiles(args.models), _tps(args.tp))
    run = run_child(request, python=args.python, pythonpath=args.pythonpath, timeout_s=args.timeout)
    matrix = build_matrix(request, run, note=args.note)
    if args.image:
        matrix.provenance.image = args.image
    if args.output and not str(args.output).endswith(".json"):
        write_split(matrix, args.output)
    elif args.output:
        write_text_atomic(args.output, compact_json(matrix))
    if args.json:
        print(compact_json(matrix), end="")
    else:
        head = f"vLLM {run.versions.get('vllm')} ({run.python})"
        print(f"{head}: {len(matrix.cells)} cells in {run.wall_s:.1f} s", file=sys.stderr)
        if run.skipped:
            print(f"skipped: {run.skipped}", file=sys.stderr)
        else:
            print(_summary(matrix))
    return EXIT_PARTIAL if run.skipped else 0
