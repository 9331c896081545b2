"""Record every catalog model x GPU answer of ``probe recommend`` (text and ``--json``), or compare two.

A refactor that must keep behaviour byte-identical records the answers before and after and compares:

    python3 tools/snapshot_answers.py record before.jsonl      # at the old commit
    python3 tools/snapshot_answers.py record after.jsonl       # at the new one
    python3 tools/snapshot_answers.py compare before.jsonl after.jsonl

Each line of a record is one question (the argv), its exit code, stdout and stderr. Set-ups beyond the
plain question (``--tp 2 --ep``, ``--kv-cache-dtype fp8``, ``--speculative mtp``, another vLLM) are asked for
every model on a few GPUs. The published matrices in ``matrices/`` are the evidence, as a user's checkout has;
the checkout's own path is written ``<checkout>``, so a record made in a worktree of the old commit
compares with one made here.
``compare`` prints each question whose answer differs and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUPS: tuple[tuple[str, ...], ...] = (
    ("--tp", "2", "--ep"),
    ("--kv-cache-dtype", "fp8"),
    ("--speculative", "mtp"),
    ("--vllm", "0.33.0"),
)
SETUP_GPUS = ("sm_90", "sm_100", "sm_120")


def _catalog(verb: str, key: str, field: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "probe", verb, "--json"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [row[field] for row in json.loads(out)[key]]


def questions() -> list[list[str]]:
    models = _catalog("models", "models", "slug")
    gpus = _catalog("gpus", "gpus", "target")
    asked: list[list[str]] = []
    for model in models:
        for gpu in gpus:
            base = ["--model", model, "--gpu", gpu]
            asked += [base, [*base, "--json"]]
            if gpu in SETUP_GPUS:
                asked += [[*base, *setup, "--json"] for setup in SETUPS]
    return asked


def _ask(argv: list[str]) -> dict[str, object]:
    env = {**os.environ, "PROBE_EVIDENCE_CACHE": "0", "COLUMNS": "200"}
    r = subprocess.run(
        [sys.executable, "-m", "probe", "recommend", *argv], cwd=ROOT, capture_output=True, text=True, env=env
    )
    # answers name the matrices they read by path: written relative to the checkout, records of two
    # checkouts (the old commit in a worktree, the new one here) compare answer for answer
    root = str(ROOT)
    return {
        "argv": argv,
        "rc": r.returncode,
        "stdout": r.stdout.replace(root, "<checkout>"),
        "stderr": r.stderr.replace(root, "<checkout>"),
    }


def record(path: Path, jobs: int) -> int:
    asked = questions()
    with ThreadPoolExecutor(jobs) as pool, path.open("w", encoding="utf-8") as fh:
        for row in pool.map(_ask, asked):
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    print(f"{len(asked)} answers recorded in {path}")
    return 0


def _load(path: Path) -> dict[str, dict[str, object]]:
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line)
    return {" ".join(r["argv"]): r for r in rows}


def compare(before: Path, after: Path) -> int:
    old, new = _load(before), _load(after)
    differ = [q for q in sorted(old.keys() | new.keys()) if old.get(q) != new.get(q)]
    for q in differ:
        print(f"differs: recommend {q}")
    print(f"{len(old)} questions before, {len(new)} after, {len(differ)} answers differ")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="ask every question, write one JSON line per answer")
    rec.add_argument("out", type=Path)
    rec.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    cmp_ = sub.add_parser("compare", help="the questions whose answers differ between two records")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        return record(args.out, args.jobs)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
