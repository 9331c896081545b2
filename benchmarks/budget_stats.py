"""The figures of a budgeted `probe run` from its journal (and the pre-pass's `JOURNAL.warm.jsonl` beside it).

Usage:  python3 benchmarks/budget_stats.py JOURNAL [--prepass JOURNAL] [--wall-s SECONDS] [--budget-s SECONDS]

(``--prepass``: the pre-pass's journal; default ``JOURNAL.warm.jsonl``, where ``probe run`` writes it.)

Prints: cells per outcome (measured / reused / not_run), the not_run reasons grouped, whether any cell
stopped while compiling was recorded as a failure (``timeout`` in phase ``jit``: must be 0), the JIT
pre-pass cells (outcome, wall time, units built), the median ok cell, and — given the run's wall time
(``/usr/bin/time``) and its budget — whether it ended inside the budget.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from probe.run.estimates import timed_rows


def _reason(cause: str | None) -> str:
    text = cause or "not run"
    for marker in ("compile budget exceeded", "run budget spent", "run budget:", "its JIT module"):
        if text.startswith(marker):
            return marker.rstrip(":")
    return text[:60]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("journal")
    ap.add_argument("--prepass", default=None, help="the JIT pre-pass's journal (default JOURNAL.warm.jsonl)")
    ap.add_argument("--wall-s", type=float, default=None, help="the whole run's wall time (seconds)")
    ap.add_argument("--budget-s", type=float, default=None, help="its --budget (seconds)")
    args = ap.parse_args()
    rows: dict[str, dict] = {}
    for r in timed_rows(Path(args.journal)):
        if r["id"] not in rows or rows[r["id"]].get("outcome") == "not_run":
            rows[r["id"]] = r
    reused = [r for r in rows.values() if (r.get("details") or {}).get("reused_from")]
    measured = [r for r in rows.values() if r not in reused and r.get("outcome") != "not_run"]
    not_run = [r for r in rows.values() if r.get("outcome") == "not_run"]
    print(f"{len(rows)} cells: {len(measured)} measured, {len(reused)} reused, {len(not_run)} not_run")
    outcomes = Counter(r["outcome"] for r in measured).most_common()
    print("measured outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes))
    reasons = Counter(_reason(r.get("root_cause")) for r in not_run).most_common()
    print("not_run reasons: " + ", ".join(f"{k} {v}" for k, v in reasons))
    bad = [r["id"] for r in rows.values() if r.get("outcome") == "timeout" and r.get("phase") == "jit"]
    print(f"compile stops recorded as a failure (timeout in phase jit): {len(bad)} {bad[:5] if bad else ''}")
    ok = [r["wall_s"] for r in measured if r.get("outcome") == "ok"]
    if ok:
        print(f"ok cells: {len(ok)}, median {statistics.median(ok):.2f} s")
    warm = Path(args.prepass or f"{args.journal}.warm.jsonl")
    for r in timed_rows(warm) if warm.is_file() else []:
        units = (r.get("details") or {}).get("jit_units") or {}
        built = f", {units.get('done')} of {units.get('total')} units" if units else ""
        cause = (r.get("root_cause") or "")[:100]
        print(f"pre-pass {r['id']}: {r['outcome']} {r.get('wall_s', 0):.1f} s{built}  {cause}")
    if args.wall_s is not None and args.budget_s is not None:
        inside = "inside" if args.wall_s <= args.budget_s else "OVER"
        print(f"wall {args.wall_s:.1f} s of a {args.budget_s:.0f} s budget: {inside}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
