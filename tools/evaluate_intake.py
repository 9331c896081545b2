"""Score `probe report import` on threads it was not tuned on.

The material is ``tests/data/report_intake/``: ``thread_K_N.txt`` (an issue thread as the GitHub API
gives it: title, body, comments) and ``thread_K_N.expected.json`` (what a person read from it: GPUs,
versions, kind, the backend vLLM named, outcome, a substring of the decisive line). Per field:

- gpus: the set of compute capabilities is equal;
- versions: every expected package is found and agrees (one value a prefix of the other: ``12.9`` and
  ``12.9.86`` agree); an extra package found counts against nothing;
- kind, outcome: equal; backend: equal, case and ``-``/``_`` ignored (``null`` expects none found);
- root cause: the expected substring is in the draft's log line (threads with none expected are skipped).

    python3 tools/evaluate_intake.py [DIR] [--json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probe.decide.report_intake import draft_from_text  # noqa: E402

FIELDS = ("gpus", "versions", "kind", "backend", "outcome", "root_cause")


def _norm(name: Any) -> str | None:
    return None if name in (None, "unknown") else str(name).lower().replace("-", "_")


def _versions_agree(want: dict[str, str], got: dict[str, list[str]]) -> bool:
    for pkg, v in want.items():
        have = (got.get(pkg) or [None])[0]
        if have is None or not (have.startswith(v) or v.startswith(have)):
            return False
    return True


def score(expected: dict[str, Any], entry: dict[str, Any]) -> dict[str, bool | None]:
    """Per field: True / False, or None where the thread gives nothing to check."""
    want_rc = expected.get("root_cause_contains")
    line = str(entry.get("log_line") or "")
    return {
        "gpus": set(expected["gpus"]) == {f"sm_{g}" for g in entry.get("gpus", [])},
        "versions": _versions_agree(expected["versions"], entry.get("versions", {})),
        "kind": expected["kind"] == entry.get("kind"),
        "backend": _norm(expected["backend"]) == _norm(entry.get("backend")),
        "outcome": expected["outcome"] == entry.get("outcome"),
        "root_cause": None if want_rc is None else want_rc.lower() in line.lower(),
    }


def evaluate(folder: Path) -> list[tuple[str, dict[str, bool | None], dict[str, Any]]]:
    rows = []
    for exp_path in sorted(folder.glob("*.expected.json")):
        stem = exp_path.name.removesuffix(".expected.json")
        expected = json.loads(exp_path.read_text())
        text = (folder / f"{stem}.txt").read_text(encoding="utf-8", errors="replace")
        entry = draft_from_text(text, expected.get("source")).entry
        rows.append((stem, score(expected, entry), entry))
    return rows


def main(argv: list[str]) -> int:
    folder = Path(next((a for a in argv if not a.startswith("-")), ROOT / "tests/data/report_intake"))
    rows = evaluate(folder)
    totals = {f: [0, 0] for f in FIELDS}
    for stem, marks, entry in rows:
        for f, ok in marks.items():
            if ok is not None:
                totals[f][0] += bool(ok)
                totals[f][1] += 1
        if "--json" not in argv:
            wrong = [f for f, ok in marks.items() if ok is False]
            got = f"{entry.get('gpus')} {entry.get('kind')}/{entry.get('backend')} {entry.get('outcome')}"
            print(f"{stem:14} {'ok' if not wrong else 'miss ' + ','.join(wrong):40} {got}")
    summary = {f: {"right": r, "of": n} for f, (r, n) in totals.items()}
    if "--json" in argv:
        print(json.dumps({"threads": len(rows), "fields": summary}, indent=1))
    else:
        print(f"{len(rows)} threads")
        for f, (r, n) in totals.items():
            print(f"  {f:10} {r}/{n} ({100 * r / max(n, 1):.0f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
