"""How well `probe classify` reads a library it has no signature for: a leave-one-signature-out score.

For every corpus log the classifier gets right through a specific signature or exception rule
(rule ``stated-cause``), that one signature / rule is removed and the log classified again. The share
whose outcome stays right is what the generic layers (cause words, fault markers, wrappers) recover
when a log comes from a library or a message the signatures have never seen — the situation of every
first pass on a new held-out round. Printed with the cause words and without them.

    python3 tools/ablate_signatures.py [--misses]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probe.catalog.signatures import SignatureDB, signature_db  # noqa: E402
from probe.sandbox.classifier import LogScanner  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "logs"


def classify(path: Path, db: SignatureDB) -> dict:
    sc = LogScanner(db)
    with path.open("rb") as f:
        sc.feed_stream(f)
    return sc.verdict().as_dict()


def without(db: SignatureDB, name: str, *, words: bool) -> SignatureDB:
    """``db`` less the signature or exception rule the verdict named (``exception:ID``)."""
    return db.model_copy(
        update={
            "signatures": [s for s in db.signatures if s.id != name],
            "exceptions": [e for e in db.exceptions if f"exception:{e.id}" != name],
            "cause_words": db.cause_words if words else [],
        }
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--misses", action="store_true", help="list the logs whose outcome changes")
    args = ap.parse_args()
    db = signature_db()
    score = {True: 0, False: 0}
    total = 0
    for index in sorted(CORPUS.glob("*/index.json")):
        for e in json.loads(index.read_text()):
            path = index.parent / e["file"]
            got = classify(path, db)
            if got["outcome"] != e["outcome"] or got["rule"] != "stated-cause":
                continue
            total += 1
            for words in (True, False):
                again = classify(path, without(db, got["signature"], words=words))
                score[words] += again["outcome"] == e["outcome"]
                if words and args.misses and again["outcome"] != e["outcome"]:
                    print(
                        f"{index.parent.name}/{e['file']}: want {e['outcome']}, got {again['outcome']} "
                        f"without {got['signature']}"
                    )
    for words in (True, False):
        label = "with cause words   " if words else "without cause words"
        print(
            f"{label}: {score[words]}/{total} ({100 * score[words] / max(total, 1):.1f} %) outcomes right "
            "with the deciding signature removed"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
