"""Score `probe classify` on the held-out log set (or any directory with the same index.json format).

Runs the real CLI (`python3 -m probe classify --json FILE`) on every entry of index.json and prints
one line per file plus totals: outcome accuracy, root-cause accuracy (the expected substring is in
the reported root-cause line; entries whose root_cause_contains is null count as correct when the
outcome is right), degraded-flag accuracy, and all three together.

    python3 tests/sandbox/heldout/evaluate.py [DIR] [--json]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


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


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    args = [a for a in argv if a != "--json"]
    d = Path(args[0]) if args else Path(__file__).resolve().parent
    index = json.loads((d / "index.json").read_text())
    rows = []
    for e in index:
        got = classify(d / e["file"])
        want_rc = e.get("root_cause_contains")
        ok_out = got.get("outcome") == e["outcome"]
        rc = got.get("root_cause")
        ok_rc = ok_out if want_rc is None else (rc is not None and want_rc in rc)
        ok_deg = bool(got.get("degraded")) == bool(e.get("degraded"))
        rows.append((e, got, ok_out, ok_rc, ok_deg))
        if not as_json:
            mark = "PASS" if ok_out and ok_rc and ok_deg else "FAIL"
            print(
                f"{mark} {e['file']}: want {e['outcome']}, got {got.get('outcome')}"
                + ("" if ok_rc else f" | root cause {got.get('root_cause')!r} lacks {want_rc!r}")
                + ("" if ok_deg else f" | degraded {got.get('degraded')}")
            )
    n = len(rows)
    tot = {
        "files": n,
        "outcome": sum(r[2] for r in rows),
        "root_cause": sum(r[3] for r in rows),
        "degraded": sum(r[4] for r in rows),
        "all_three": sum(r[2] and r[3] and r[4] for r in rows),
    }
    if as_json:
        print(json.dumps(tot))
    else:
        for k in ("outcome", "root_cause", "degraded", "all_three"):
            print(f"{k:>10}: {tot[k]}/{n} ({100 * tot[k] / n:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
