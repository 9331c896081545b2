"""How long each cell of a plan will take: from measured history, else from the cell's kind.

The history is ``probe run --estimates JOURNAL...`` (journals, ``.jsonl`` or ``.jsonl.gz``, or matrices)
when given, else the measured matrices published with probe (:func:`history`). From it: the median
``wall_s`` of the same cell id; else the median of the same kind and backend (``moe/marlin``,
``attention/FLASH_ATTN/fa3``, ``engine/auto+auto``, ``engine/auto+auto/tp=2/ep``,
``engine/auto+auto/dp=2/ep/deepep_low_latency``: a JIT-compiling engine is not a default engine); else
:data:`KIND_DEFAULT_S`. Rows the budget or a compile stop cut short, and rows copied from an earlier run
(``details.reused_from``), are not measurements and are skipped; a ``not_run`` the cell decided itself
(the image lacks a package it needs) is one. A warm worker's first cell also pays
the worker's start (torch + vLLM import, :data:`WORKER_START_S`); an isolated cell's estimate includes its
own start.

The defaults are medians of the published journals (``python3 -m probe.run.estimates
matrices/measured/*.jsonl.gz`` prints them): MoE cells 0.01 s refused / 1.25 s ok (all 3,217 MoE rows:
0.95 s mean), an
attention layer 11.9 s ok, an engine-backed attention cell 25.6 s, an engine 48.9 s ok (78.6 s mean),
the import cell 14.8 s (one row), a JIT pre-pass cell 63.4 s; the first cell of a warm worker 24-31 s
(the H100 attention runs).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probe import safejson
from probe.cells import CellSpec
from probe.errors import BadInputError

KIND_DEFAULT_S: dict[str, float] = {
    "import": 30.0,
    "moe": 1.0,
    "attention": 12.0,  # an attention layer in a warm worker
    "attention/engine": 30.0,  # an MLA layout: a 1-layer engine in its own process
    "engine": 75.0,
    "engine/tp": 130.0,  # a multi-GPU engine: TP=2 cells on a 2x H100 host took 97-138 s
    "fixture": 1.0,
}
WORKER_START_S = 25.0
#: the JIT pre-pass cells when no journal says otherwise: FlashInfer's CUTLASS MoE module from cold
#: (about 40 min on 16 cores on an H100, the devkit image), an attention layout's first forward
PREPASS_DEFAULT_S = {"warm/flashinfer-moe": 2400.0, "warm/flashinfer-moe (cached)": 30.0, "attention": 120.0}


def group_of(kind: str, params: Mapping[str, Any]) -> str:
    """The estimate group of a cell: kind and backend (with the FA version, an engine's parallel layout),
    e.g. ``moe/marlin``, ``engine/auto+auto/tp=2/ep``."""
    if kind == "engine":
        tp, dp = params.get("tensor_parallel_size") or 1, params.get("data_parallel_size") or 1
        par = (f"/tp={tp}" if tp > 1 else "") + (f"/dp={dp}" if dp > 1 else "")
        par += "/ep" if params.get("enable_expert_parallel") else ""
        a2a = (params.get("engine_args") or {}).get("all2all_backend") if dp > 1 else None
        return f"engine/{params.get('moe_backend')}+{params.get('attention_backend')}{par}" + (
            f"/{a2a}" if a2a else ""
        )
    fa = f"/fa{params['fa_version']}" if params.get("fa_version") else ""
    backend = params.get("backend")
    return f"{kind}/{backend}{fa}" if backend else str(kind)


def _kind_default(spec: CellSpec) -> float:
    kind = spec.kind.value
    if kind == "attention" and not spec.target.endswith("attention_layer:run"):
        return KIND_DEFAULT_S["attention/engine"]
    gpus = (spec.params.get("tensor_parallel_size") or 1) * (spec.params.get("data_parallel_size") or 1)
    if kind == "engine" and gpus > 1:
        return KIND_DEFAULT_S["engine/tp"]
    return KIND_DEFAULT_S.get(kind, KIND_DEFAULT_S["moe"])


@dataclass(frozen=True)
class Estimates:
    """Per-cell estimates (seconds) and where each came from."""

    by_id: Mapping[str, float] = field(default_factory=dict)
    by_group: Mapping[str, float] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    label: str = "journal"  # "journal": the runs given; "history": the published measured matrices

    def of(self, spec: CellSpec) -> tuple[float, str]:
        """(seconds, basis): ``journal`` / ``history`` (this cell), ``… group`` (its kind + backend), or
        ``default``."""
        if spec.id in self.by_id:
            return self.by_id[spec.id], self.label
        group = group_of(spec.kind.value, spec.params)
        if group in self.by_group:
            return self.by_group[group], f"{self.label} group"
        return _kind_default(spec), "default"


def _open_text(path: Path) -> Iterator[str]:
    from probe.userfile import read_text  # a regular file, bounded in size (a .gz: inflated, bounded)

    yield from read_text(path, gz=path.suffix == ".gz").splitlines(keepends=True)


def timed_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Cell rows (id, kind, params, outcome, wall_s, details) of a journal or a matrix, as plain JSON."""
    lines = list(_open_text(path))
    if lines and lines[0].lstrip().startswith("{") and '"probe_journal"' in lines[0]:  # one row per line
        for n, line in enumerate(lines[1:], 2):
            if not line.strip():
                continue
            try:
                row = safejson.loads(line)
            except ValueError as exc:  # not JSON, or nested too deeply
                if n == len(lines):  # a torn last line of a journal killed mid-write
                    return
                raise BadInputError(f"{path} line {n} is not JSON: {exc}") from exc
            if isinstance(row, dict) and "probe_journal" not in row:
                yield row
        return
    try:
        doc = safejson.loads("".join(lines))
    except ValueError as exc:
        raise BadInputError(f"{path} is neither a probe journal nor a matrix: {exc}") from exc
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        raise BadInputError(f"{path} is neither a probe journal nor a matrix (no 'cells')")
    yield from (c for c in cells if isinstance(c, dict) and c.get("evidence", "measured") == "measured")


def _measured(row: dict[str, Any]) -> bool:
    """A row whose wall time says how long the cell takes: it ran, or it decided itself that it could
    not run here (a ``not_run`` naming a package the image lacks); not a row the budget or a compile
    stop cut short, nor one copied from an earlier run."""
    details = row.get("details") if isinstance(row.get("details"), dict) else {}
    wall, outcome, cause = row.get("wall_s"), row.get("outcome"), str(row.get("root_cause") or "")
    if not isinstance(wall, (int, float)) or outcome is None or (details or {}).get("reused_from"):
        return False
    if outcome == "not_run":
        return wall > 0 and "budget" not in cause
    return True


def load_estimates(paths: Iterable[str | Path]) -> Estimates:
    """Medians per cell id and per group over the rows of every file given."""
    by_id: dict[str, list[float]] = defaultdict(list)
    by_group: dict[str, list[float]] = defaultdict(list)
    sources = []
    for p in paths:
        path = Path(p)
        sources.append(str(path))
        for row in timed_rows(path):
            if not _measured(row) or not isinstance(row.get("id"), str):
                continue
            by_id[row["id"]].append(float(row["wall_s"]))
            by_group[group_of(str(row.get("kind")), row.get("params") or {})].append(float(row["wall_s"]))
    return Estimates(
        by_id={k: statistics.median(v) for k, v in by_id.items()},
        by_group={k: statistics.median(v) for k, v in by_group.items()},
        sources=tuple(sources),
    )


def history() -> Estimates:
    """Estimates from the measured matrices published with probe (``matrices/measured/*.json``), for a
    run given no ``--estimates``: what each cell (and each kind x backend) took on the GPUs measured so
    far. Empty when the package was installed without its matrices."""
    from dataclasses import replace

    from probe.catalog.datafiles import published_matrices

    root = published_matrices()
    files = sorted((root / "measured").glob("*.json")) if root is not None else []
    return replace(load_estimates(files), label="history") if files else Estimates(label="history")


def main(argv: list[str] | None = None) -> int:
    """Print the median and mean wall time per kind (and outcome) of the journals given."""
    rows: dict[str, list[float]] = defaultdict(list)
    for p in argv if argv is not None else sys.argv[1:]:
        for row in timed_rows(Path(p)):
            if _measured(row):
                kind = "prepass" if str(row.get("id", "")).startswith("warm/") else row.get("kind")
                rows[f"{kind} {row.get('outcome')}"].append(float(row["wall_s"]))
    for key in sorted(rows):
        v = rows[key]
        med, mean = statistics.median(v), statistics.mean(v)
        print(f"{key:<28} n={len(v):<5} median {med:8.2f} s  mean {mean:8.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
