"""Score `probe classify` on the crash-log corpus, or on any folder with the same index.json format.

The corpus is ``tests/data/logs/``: one sub-folder per collection (``tuning/``, ``multigpu/``,
``heldout1/``, ``heldout2/``, …), each with its logs and an ``index.json`` (format and label rules:
``tests/data/logs/README.md``); a held-out round also keeps its ``first_pass.txt``. Every
sub-folder with an index.json is a collection: a new round is a new folder, nothing to register.

Runs the real CLI (`python3 -m probe classify --json FILE`) on every entry of index.json and prints
one line per file plus totals: outcome accuracy, root-cause accuracy (the expected substring is in
the reported root-cause line; entries whose root_cause_contains is null count as correct when the
outcome is right), degraded-flag accuracy, and all three together.

    python3 tools/evaluate_classify.py [DIR ...] [--json]

DIR is one collection (``tests/data/logs/heldout2``) or a folder of collections (the default:
``tests/data/logs``, every collection in turn).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.sandbox.corpus import CORPUS, find_collections, read_index  # noqa: E402


def classify(path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(
        [sys.executable, "-m", "probe", "classify", "--json", str(path)],
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    if p.returncode != 0:
        return {"outcome": f"<exit {p.returncode}>", "root_cause": p.stderr.decode(errors="replace")[-200:]}
    return json.loads(p.stdout)


def score(folder: Path, *, verbose: bool) -> dict:
    rows = []
    for e in read_index(folder):
        got = classify(folder / e["file"])
        want_rc = e.get("root_cause_contains")
        ok_out = got.get("outcome") == e["outcome"]
        rc = got.get("root_cause")
        ok_rc = ok_out if want_rc is None else (rc is not None and want_rc in rc)
        ok_deg = bool(got.get("degraded")) == bool(e.get("degraded"))
        rows.append((ok_out, ok_rc, ok_deg))
        if verbose:
            mark = "PASS" if ok_out and ok_rc and ok_deg else "FAIL"
            print(
                f"{mark} {e['file']}: want {e['outcome']}, got {got.get('outcome')}"
                + ("" if ok_rc else f" | root cause {got.get('root_cause')!r} lacks {want_rc!r}")
                + ("" if ok_deg else f" | degraded {got.get('degraded')}")
            )
    return {
        "files": len(rows),
        "outcome": sum(r[0] for r in rows),
        "root_cause": sum(r[1] for r in rows),
        "degraded": sum(r[2] for r in rows),
        "all_three": sum(r[0] and r[1] and r[2] for r in rows),
    }


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    dirs = [Path(a) for a in argv if a != "--json"] or [CORPUS]
    folders = [c for d in dirs for c in find_collections(d)]
    if not folders:
        print(f"no index.json in {', '.join(map(str, dirs))} or its sub-folders", file=sys.stderr)
        return 2
    totals = {}
    for folder in folders:
        if not as_json and len(folders) > 1:
            print(f"== {folder.name}")
        tot = score(folder, verbose=not as_json)
        totals[folder.name] = tot
        if not as_json:
            _print_totals(tot)
    if len(folders) > 1:
        totals["all"] = {k: sum(t[k] for t in totals.values()) for k in next(iter(totals.values()))}
        if not as_json:
            print("== all collections")
            _print_totals(totals["all"])
    if as_json:
        print(json.dumps(totals[folders[0].name] if len(folders) == 1 else totals))
    return 0


def _print_totals(tot: dict) -> None:
    n = tot["files"]
    for k in ("outcome", "root_cause", "degraded", "all_three"):
        print(f"{k:>10}: {tot[k]}/{n} ({100 * tot[k] / n:.1f}%)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
