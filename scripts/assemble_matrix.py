#!/usr/bin/env python3
"""Assemble one measured matrix from the journals of ``probe run`` (any GPU, any number of runs).

    python3 scripts/assemble_matrix.py [LABEL=]JOURNAL... -o MATRIX [options]

A journal is what ``probe run --journal`` writes (plain or ``.gz``): a header line per start or resume and
one ``CellResult`` per cell; a matrix ``probe run -o`` wrote stands in for a lost journal (its measured
cells are read as rows, it has no header). Journals are read in the order given, oldest first: a cell's row
in a later journal replaces its row from an earlier one (within one journal the first row of a cell counts,
as ``probe run --resume`` reads it). Cells keep the position of their first appearance, or the plan's order
with ``--plan``.

Choosing rows (SEL is a glob matched against a journal's LABEL and its file name; the label defaults to
the file name; several journals may share a label; COND is ``FIELD=VALUE`` (equal) or ``FIELD~TEXT``
(contains), several joined by ``&``; FIELD is a ``CellResult`` field or ``params.X`` / ``details.X``,
compared as JSON text, so ``params.fa_version=2`` and ``outcome=oom`` work):

  --drop 'SEL:COND'         leave out the rows of those journals that match (as if never journaled)
  --keep 'SEL:COND'         of those journals keep only rows matching one of the --keep conditions
  --detail 'SEL:KEY=VALUE'  add ``details[KEY] = VALUE`` to every row of those journals
  --label-detail KEY        record each row's journal label in ``details[KEY]``
  --strip-log-prefixes      store root causes without a logger prefix (as ``probe run`` now does)

The matrix:

  --plan PLAN.json[.gz]     the planned cells (a JSON list of cells with an ``id``): only those, in that
                            order; ``run.cells_planned`` is their number (else ``--planned N``)
  --provenance JSON|@FILE   provenance fields (``image``, ``platform``, ``versions``, ``gpu`` …) merged
                            over what the journal headers give (``host``; ``gpu`` from ``device``)
  --image, --created-at     shorthands for those fields (created_at defaults to the newest header time)
  --note TEMPLATE           provenance note; ``{cells}``, ``{planned}``, ``{missing_count}``,
                            ``{missing}`` and ``{count[LABEL]}`` (cells taken per label) are filled in
  --supersede OLDER.json    an earlier matrix of the same GPU and image: cells measured again here
                            replace its cells, which stay in ``details.superseded`` when the outcome
                            or root cause changed (``probe merge``'s rule for runs of one column)

The exact commands that rebuild each published matrix, byte for byte, are in its provenance page
(``matrices/measured/*.provenance.md``); ``tests/scripts/test_assemble_matrix.py`` runs them.
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probe.cells import CellResult
from probe.errors import BadInputError, ProbeError, UsageError
from probe.matrix.build import build_matrix, normalize_gpu, write_matrix
from probe.matrix.fleet import union
from probe.matrix.io import load_matrix
from probe.matrix.schema import Matrix
from probe.sandbox.logtext import strip_prefixes


@dataclass(frozen=True)
class Condition:
    field: str
    op: str  # "=" equal, "~" contains
    value: str

    def holds(self, row: dict[str, Any]) -> bool:
        found: Any = row
        for part in self.field.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        text = found if isinstance(found, str) else json.dumps(found)
        return text == self.value if self.op == "=" else self.value in text


@dataclass(frozen=True)
class Rule:
    """``SEL:COND&COND`` (drop / keep) or ``SEL:KEY=VALUE`` (detail)."""

    selector: str
    conditions: tuple[Condition, ...] = ()
    detail: tuple[str, str] | None = None

    def selects(self, source: Source) -> bool:
        return any(fnmatch.fnmatchcase(name, self.selector) for name in (source.label, source.path.name))

    def matches(self, row: dict[str, Any]) -> bool:
        return all(c.holds(row) for c in self.conditions)


@dataclass(frozen=True)
class Source:
    label: str
    path: Path


@dataclass
class Picked:
    """The rows chosen so far: cell id -> (row, label), in first-appearance order."""

    rows: dict[str, tuple[CellResult, str]] = field(default_factory=dict)
    headers: list[dict[str, Any]] = field(default_factory=list)


def parse_source(text: str) -> Source:
    """``JOURNAL`` or ``LABEL=JOURNAL`` (an existing file name containing '=' is taken whole)."""
    path = Path(text)
    if path.is_file() or "=" not in text:
        return Source(path.name.removesuffix(".gz").removesuffix(".jsonl"), path)
    label, _, rest = text.partition("=")
    return Source(label, Path(rest))


def _split_rule(text: str, option: str) -> tuple[str, str]:
    selector, sep, rest = text.partition(":")
    if not sep or not selector or not rest:
        raise UsageError(f"{option} {text!r}: expected SELECTOR:…")
    return selector, rest


def parse_filter(text: str, option: str) -> Rule:
    selector, rest = _split_rule(text, option)
    conditions = []
    for part in rest.split("&"):
        eq, tilde = part.find("="), part.find("~")
        cut = min(i for i in (eq, tilde) if i >= 0) if max(eq, tilde) >= 0 else -1
        if cut <= 0:
            raise UsageError(f"{option} {text!r}: a condition is FIELD=VALUE or FIELD~TEXT, found {part!r}")
        conditions.append(Condition(part[:cut].strip(), part[cut], part[cut + 1 :]))
    return Rule(selector, tuple(conditions))


def parse_detail(text: str) -> Rule:
    selector, rest = _split_rule(text, "--detail")
    key, sep, value = rest.partition("=")
    if not sep or not key:
        raise UsageError(f"--detail {text!r}: expected SELECTOR:KEY=VALUE")
    return Rule(selector, detail=(key, value))


def _matrix_rows(path: Path, text: str) -> list[CellResult] | None:
    """The measured cells of a matrix ``probe run -o`` wrote, as journal rows (for a run whose journal
    was lost but whose matrix was kept); None when ``text`` is not such a matrix."""
    if not text.lstrip().startswith("{") or "\n{" in text.strip():
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list) or "schema_version" not in doc:
        return None
    fields = set(CellResult.model_fields)
    cells = [c for c in doc["cells"] if isinstance(c, dict) and c.get("evidence", "measured") == "measured"]
    try:
        return [CellResult.model_validate({k: v for k, v in c.items() if k in fields}) for c in cells]
    except ValueError as exc:
        raise BadInputError(f"matrix {path}: a cell is not a result row: {exc}") from exc


def read_journal(path: Path) -> tuple[list[dict[str, Any]], list[CellResult]]:
    """Header lines and cell rows of a journal (plain or gzip), or the measured cells of a matrix."""
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read journal {path}: {exc}") from exc
    from_matrix = _matrix_rows(path, text)
    if from_matrix is not None:
        return [], from_matrix
    headers: list[dict[str, Any]] = []
    rows: list[CellResult] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"journal {path} line {n} is not JSON: {exc}") from exc
        if "outcome" in obj:
            rows.append(CellResult.model_validate(obj))
        elif "probe_journal" in obj:
            headers.append(obj)
    return headers, rows


@dataclass(frozen=True)
class Selection:
    drop: tuple[Rule, ...] = ()
    keep: tuple[Rule, ...] = ()
    details: tuple[Rule, ...] = ()
    label_detail: str | None = None
    strip_log_prefixes: bool = False


def _wanted(source: Source, row: dict[str, Any], sel: Selection) -> bool:
    if any(r.selects(source) and r.matches(row) for r in sel.drop):
        return False
    keeps = [r for r in sel.keep if r.selects(source)]
    return not keeps or any(r.matches(row) for r in keeps)


def _dressed(row: CellResult, source: Source, sel: Selection) -> CellResult:
    details = dict(row.details)
    for rule in sel.details:
        if rule.detail and rule.selects(source):
            details[rule.detail[0]] = rule.detail[1]
    if sel.label_detail:
        details[sel.label_detail] = source.label
    update: dict[str, Any] = {"details": details}
    if sel.strip_log_prefixes and row.root_cause:
        update["root_cause"] = strip_prefixes(row.root_cause).strip() or row.root_cause
    return row.model_copy(update=update)


def collect(sources: list[Source], sel: Selection) -> Picked:
    """Every journal in order; a later journal's row of a cell replaces the earlier one."""
    picked = Picked()
    for source in sources:
        headers, rows = read_journal(source.path)
        picked.headers.extend(headers)
        first: dict[str, CellResult] = {}
        for row in rows:
            first.setdefault(row.id, row)  # as Journal.open reads a journal: the first row of a cell
        for cid, row in first.items():
            if _wanted(source, row.model_dump(mode="json"), sel):
                picked.rows[cid] = (_dressed(row, source, sel), source.label)
    return picked


def read_plan(path: Path) -> list[str]:
    raw = path.read_bytes()
    try:
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, ValueError) as exc:
        raise BadInputError(f"cannot read plan {path}: {exc}") from exc
    cells = data.get("cells") if isinstance(data, dict) else data
    if not isinstance(cells, list) or not all(isinstance(c, dict) and "id" in c for c in cells):
        raise BadInputError(f"plan {path}: expected a JSON list of cells with an 'id'")
    return [str(c["id"]) for c in cells]


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _utc(stamp: str) -> str:
    return stamp.replace("+00:00", "Z")


def provenance(headers: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Host and GPU from the newest header that has them, then ``--provenance`` and the shorthands."""
    prov: dict[str, Any] = {"image": None, "image_digest": None}
    times = [h.get("started_at") or h.get("resumed_at") for h in headers]
    if any(times):
        prov["created_at"] = _utc(max(t for t in times if t))
    for h in headers:
        if h.get("host"):
            prov["host"] = h["host"]
        device = h.get("device")
        if isinstance(device, dict) and device.get("compute_cap"):
            raw = {"name": device.get("name"), "cc": device["compute_cap"]}
            if isinstance(device.get("total_gib"), (int, float)):
                raw["memory_gib"] = round(float(device["total_gib"]), 1)
            prov["gpu"] = normalize_gpu(raw).model_dump()
    prov = _deep_merge(prov, args.provenance or {})
    if args.image is not None:
        prov["image"] = args.image
    if args.created_at is not None:
        prov["created_at"] = args.created_at
    return prov


def _provenance_arg(text: str) -> dict[str, Any]:
    try:
        raw = Path(text[1:]).read_text(encoding="utf-8") if text.startswith("@") else text
        value = json.loads(raw)
    except (OSError, json.JSONDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"not a JSON object or @FILE: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--provenance takes a JSON object")
    return value


def assemble(args: argparse.Namespace) -> tuple[Matrix, str]:
    sources = [parse_source(s) for s in args.journals]
    for s in sources:
        if not s.path.is_file():
            raise UsageError(f"{s.path}: no such journal")
    sel = Selection(
        drop=tuple(parse_filter(t, "--drop") for t in args.drop),
        keep=tuple(parse_filter(t, "--keep") for t in args.keep),
        details=tuple(parse_detail(t) for t in args.detail),
        label_detail=args.label_detail,
        strip_log_prefixes=args.strip_log_prefixes,
    )
    picked = collect(sources, sel)
    plan = read_plan(args.plan) if args.plan else None
    order = plan if plan is not None else list(picked.rows)
    chosen = [picked.rows[cid] for cid in order if cid in picked.rows]
    missing = [cid for cid in plan or [] if cid not in picked.rows]
    planned = len(plan) if plan is not None else args.planned
    prov = provenance(picked.headers, args)
    count = Counter(label for _, label in chosen)
    if args.note is not None:
        fields = {"cells": len(chosen), "planned": planned, "missing_count": len(missing)}
        try:
            prov["note"] = args.note.format(count=count, missing=", ".join(missing), **fields)
        except (KeyError, IndexError, ValueError) as exc:
            raise UsageError(f"--note: cannot fill in {exc}") from exc
    matrix = build_matrix([row for row, _ in chosen], provenance=prov, cells_planned=planned)
    summary = f"{len(chosen)}/{planned if planned is not None else '?'} cells; " + ", ".join(
        f"{n} from {label}" for label, n in count.items()
    )
    if missing:
        summary += f"; {len(missing)} planned cells not measured: {', '.join(missing)}"
    if args.supersede:
        older = load_matrix(args.supersede)
        again = {c.id for c in matrix.cells}
        kept = [c.id for c in older.cells if c.id not in again]
        matrix = union([older, matrix])
        changed = sum(1 for c in matrix.cells if c.details.get("superseded"))
        summary += f"; over {args.supersede}: {changed} cells changed, {len(kept)} kept from it unmeasured"
    return matrix, summary


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="assemble_matrix.py",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("journals", nargs="+", metavar="[LABEL=]JOURNAL")
    ap.add_argument("-o", "--output", required=True, type=Path, metavar="MATRIX")
    ap.add_argument("--plan", type=Path, metavar="PLAN.json[.gz]")
    ap.add_argument("--planned", type=int, metavar="N", help="run.cells_planned (without --plan)")
    ap.add_argument("--drop", action="append", default=[], metavar="SEL:COND")
    ap.add_argument("--keep", action="append", default=[], metavar="SEL:COND")
    ap.add_argument("--detail", action="append", default=[], metavar="SEL:KEY=VALUE")
    ap.add_argument("--label-detail", metavar="KEY")
    ap.add_argument("--strip-log-prefixes", action="store_true")
    ap.add_argument("--provenance", type=_provenance_arg, metavar="JSON|@FILE")
    ap.add_argument("--image")
    ap.add_argument("--created-at", metavar="ISO-8601")
    ap.add_argument("--note", metavar="TEMPLATE")
    ap.add_argument("--supersede", type=Path, metavar="OLDER.json")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        matrix, summary = assemble(args)
        write_matrix(matrix, args.output)
    except ProbeError as exc:
        print(f"assemble_matrix.py: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"{summary} -> {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
