"""Import field reports written in the research staging format into a report file (schema 3).

The staging format is one JSON object per line (``*.jsonl``) with ``gpus`` as ``sm_120`` strings,
``int4`` for GPTQ/AWQ W4A16, versions as the thread wrote them and a free-text ``checked``; a
``*.json`` file may instead hold a list of entries already in schema 3. Each entry is normalised
(docs/reports.md#normalisation), checked by probe's own report rules and merged into ``--into``
(default: the packaged ``probe/data/reports.json``): an entry whose source and backend (and FA version)
are already there is dropped as a duplicate, its ``also`` links kept on the entry that stays.

  python3 scripts/import_reports.py staging/moe.jsonl staging/attention.jsonl --into probe/data/reports.json
  python3 scripts/import_reports.py batch.jsonl --dry-run     # what would change, nothing written

Exit: 0 imported; 6 an entry still fails the checks after normalisation (nothing written).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probe.reports import vocab  # noqa: E402
from probe.reports.rules import FIELDS, SCHEMA_VERSION, duplicate_key, report_problems  # noqa: E402

DEFAULT_INTO = ROOT / "probe" / "data" / "reports.json"
ABOUT = (
    "Field reports: cited public reports of what failed (or worked) for a vLLM / FlashInfer backend on a "
    "GPU, with the versions it was seen on and the fix, if any. Schema: docs/reports.md."
)
#: what a staging ``checked`` says about a non-exact vLLM build ("vLLM build as written: main (2026-04)")
_AS_WRITTEN = re.compile(r"vLLM build as written:\s*([^;|]+?)\s*(?:[;|]|$)")


def _versions(d: dict[str, Any], notes: list[str]) -> dict[str, list[str]]:
    """Exact versions per package; the rest (branches, nightlies, containers) goes to ``notes``."""
    out: dict[str, list[str]] = {}
    for pkg, seen in (d.get("versions") or {}).items():
        pkg = vocab.PACKAGE_ALIASES.get(pkg, pkg)
        for text in seen if isinstance(seen, list) else [seen]:
            exact, note = vocab.split_version(pkg, text) if pkg in vocab.PACKAGES else (None, f"{pkg} {text}")
            if exact and exact not in out.setdefault(pkg, []):
                out[pkg].append(exact)
            if note:
                notes.append(note)
    return {k: v for k, v in out.items() if v}


def _pin(d: dict[str, Any], name: str, notes: list[str]) -> dict[str, str] | None:
    pin = d.get(name)
    if not pin:
        return None
    out = {}
    for k, v in pin.items():
        if k == "pr" or (k in vocab.PACKAGES and vocab.exact_version(k, v)):
            out[k] = v
        else:
            notes.append(f"{name.replace('_', ' ')} {k} {v}")
    return out or None


def _versions_text(d: dict[str, Any], notes: list[str]) -> str | None:
    m = _AS_WRITTEN.search(d.get("checked") or "")
    if m and not d.get("versions", {}).get("vllm"):
        notes.append(f"vLLM {m.group(1)}")
    if d.get("versions_text"):
        notes.insert(0, d["versions_text"])
    return "; ".join(dict.fromkeys(notes)) or None


def seen_in(d: dict[str, Any], versions: dict[str, list[str]], text: str | None) -> str:
    """The stack a report was seen in: vLLM when it names a vLLM version (exact or as written),
    else SGLang when it names an SGLang one, else the repository of its thread."""
    if d.get("seen_in"):
        return str(d["seen_in"])
    if "vllm" in versions or (text and re.search(r"\bvllm\b", text, re.I)):
        return "vllm"
    if "sglang" in versions or (text and "sglang" in text.lower()):
        return "sglang"
    m = re.match(r"https://github\.com/([^/]+/[^/]+)/", d.get("source") or "")
    return vocab.REPOS.get(m.group(1), "other") if m else "other"


def normalise(d: dict[str, Any]) -> dict[str, Any]:
    """A staging (or schema-3) entry in schema 3, in the file's field order."""
    notes: list[str] = []
    kind, backend = vocab.normal_backend(d["kind"], d["backend"])
    out = dict(d)
    out.update(
        gpus=[vocab.normal_gpu(g) for g in d["gpus"]],
        kind=kind,
        backend=backend,
        quant=vocab.normal_quant(d.get("quant")),
        versions=_versions(d, notes),
        introduced_in=_pin(d, "introduced_in", notes),
        fixed_in=_pin(d, "fixed_in", notes),
        last_affected=_pin(d, "last_affected", notes),
        works_with=[vocab.normal_name(w) for w in d.get("works_with", [])],
    )
    out["versions_text"] = _versions_text(d, notes)
    out["seen_in"] = seen_in(d, out["versions"], out["versions_text"])
    if d.get("model_specific") is None:  # left out or null: the outcome's default (docs/reports.md)
        out["model_specific"] = d["outcome"] not in vocab.GENERAL_OUTCOMES and d["outcome"] != "ok"
    if out.get("workaround") is not None and not any(out["workaround"].values()):
        out["workaround"] = None
    return {k: out.get(k) for k in FIELDS if out.get(k) is not None or k == "source"}


def _merge_also(kept: dict[str, Any], dropped: dict[str, Any]) -> None:
    links = [u for u in [*kept.get("also", []), *dropped.get("also", [])] if u != kept.get("source")]
    kept["also"] = list(dict.fromkeys(links))


def _read(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    return data["reports"] if isinstance(data, dict) else data


def run(inputs: list[Path], into: Path, dry_run: bool) -> int:
    doc = json.loads(into.read_text(encoding="utf-8")) if into.is_file() else {}
    reports: list[dict[str, Any]] = list(doc.get("reports", []))
    by_key = {k: r for r in reports if (k := duplicate_key(r))}
    ids = {r["id"] for r in reports}
    added = dropped = 0
    bad: list[str] = []
    for path in inputs:
        for d in _read(path):
            entry = normalise(d)
            key = duplicate_key(entry)
            if (key and key in by_key) or entry["id"] in ids:
                kept = by_key.get(key) if key else next(r for r in reports if r["id"] == entry["id"])
                _merge_also(kept or entry, entry)
                print(
                    f"duplicate dropped: {entry['id']} (same source and backend as {(kept or entry)['id']})"
                )
                dropped += 1
                continue
            bad += [f"{path.name}: {entry['id']}: {p}" for p in report_problems(entry)]
            reports.append(entry)
            ids.add(entry["id"])
            if key:
                by_key[key] = entry
            added += 1
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 6
    print(f"{added} added, {dropped} duplicates dropped, {len(reports)} reports in {into}")
    if not dry_run:
        out = {"schema_version": SCHEMA_VERSION, "about": doc.get("about", ABOUT), "reports": reports}
        into.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", type=Path, help="staging *.jsonl files, or *.json lists in schema 3")
    p.add_argument("--into", type=Path, default=DEFAULT_INTO, help="the report file to merge into")
    p.add_argument("--dry-run", action="store_true", help="check and count, write nothing")
    args = p.parse_args(argv)
    return run(args.inputs, args.into, args.dry_run)


if __name__ == "__main__":
    raise SystemExit(main())
