"""``probe run --reuse BASELINE``: copy a cell's result from an earlier run when nothing it depends on
changed; run everything else.

Every result ``probe run`` records carries ``details.reuse = {"run": RUN_ID, "inputs": {...}}``: what the
result depended on when it was measured (:func:`cell_inputs`): probe's version, the GPU (name and
compute capability), the driver, the CUDA version torch was built for, and the digest
(:mod:`probe.run.digests`) of every component the cell runs on (the backend catalog's ``components``: vLLM,
torch and the CUDA libraries always; FlashInfer for ``flashinfer_*`` / FLASHINFER cells; Triton for
triton / TRITON_ATTN / FLEX_ATTENTION; DeepGEMM for ``deep_gemm``; CuTe DSL for FA4 and
``flashinfer_cutedsl``; engine and import cells: everything). A planned cell is copied from the baseline
(a journal or a matrix) when the baseline holds a measured row of the same id, kind and parameters (the
scheduler's memory estimate aside: :data:`probe.cell_params.BUDGET_KEYS`) whose inputs equal today's;
the copy keeps every field of the original and adds ``details.reused_from`` (the run that measured it).
A cell is never copied when today's GPU is unknown (no ``nvidia-smi``) or one of
its components cannot be digested (:data:`probe.run.digests.UNKNOWN`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probe import __version__
from probe.catalog.backends import Components, catalog
from probe.cell_params import BUDGET_KEYS
from probe.cells import CellRecord, CellResult, CellSpec
from probe.errors import BadInputError
from probe.outcomes import unknown
from probe.run.digests import ABSENT, UNKNOWN, DigestCache, component_digests, installed, torch_cuda
from probe.run.estimates import timed_rows


def deps_table() -> Components:
    """The components of the backend catalog (``probe/data/backends.json``), validated."""
    return catalog().components


def components_of(kind: str, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The components a cell of ``kind`` with ``params`` runs on (sorted)."""
    backend = params.get("backend") if kind != "engine" else None
    return catalog().components_of(kind, str(backend), params.get("fa_version"))


@dataclass(frozen=True)
class Environment:
    """What every result of this run depends on: probe, GPU, driver, CUDA, component digests."""

    probe_version: str
    gpu: str | None
    driver: str | None
    cuda: str | None
    packages: Mapping[str, str] = field(default_factory=dict)
    versions: Mapping[str, str] = field(default_factory=dict)  # distribution -> version (components')

    def cell_inputs(self, kind: str, params: Mapping[str, Any]) -> dict[str, str | None]:
        out: dict[str, str | None] = {"probe": self.probe_version, "gpu": self.gpu, "driver": self.driver,
                                      "cuda": self.cuda}  # fmt: skip
        for comp in components_of(kind, params):
            out[comp] = self.packages.get(comp, ABSENT)
        return out

    def blocker(self, inputs: Mapping[str, str | None]) -> str | None:
        """Why a cell with these inputs can never be copied (None: it can)."""
        if not self.gpu:
            return "the GPU is not known here (no nvidia-smi answer)"
        for comp, value in inputs.items():
            if value and value.startswith(UNKNOWN):
                return f"{comp} cannot be digested ({value.partition(': ')[2] or value})"
        return None


def environment(site_dirs: Sequence[str], gpu: Mapping[str, Any], cache: DigestCache) -> Environment:
    """This host's environment: ``gpu`` as ``probe.matrix.build.nvidia_smi`` reports it."""
    comps = {k: tuple(v) for k, v in deps_table().groups.items()}
    dists = installed(site_dirs)
    packages = component_digests(dists, comps, cache)
    cache.save()
    pats = [p for v in comps.values() for p in v]
    versions = {
        n: d.version for n, d in sorted(dists.items()) if any(fnmatch.fnmatchcase(n, p) for p in pats)
    }
    name = gpu.get("name")
    cc = gpu.get("cc")
    return Environment(
        probe_version=__version__,
        gpu=f"{name} ({cc})" if name and cc else (name or None),
        driver=gpu.get("driver"),
        cuda=torch_cuda(site_dirs),
        packages=packages,
        versions=versions,
    )


def stamp(result: CellResult, env: Environment, run_id: str) -> None:
    """Record what ``result`` depended on (``details.reuse``), so a later run can copy it."""
    if result.outcome.value == "not_run" or "reused_from" in result.details:
        return
    result.details["reuse"] = {"run": run_id, "inputs": env.cell_inputs(result.kind.value, result.params)}


@dataclass(frozen=True)
class Baseline:
    """The cells of an earlier run's journal or matrix, as plain JSON (measured ones only)."""

    source: str
    cells: Mapping[str, dict[str, Any]]


def load_baseline(path: str | Path) -> Baseline:
    cells: dict[str, dict[str, Any]] = {}
    for row in timed_rows(Path(path)):
        cid = row.get("id")
        if not isinstance(cid, str):
            continue
        if cid not in cells or cells[cid].get("outcome") == "not_run":  # a later row measured it
            cells[cid] = row
    if not cells:
        raise BadInputError(f"{path}: no cells to reuse")
    return Baseline(str(path), cells)


_RESULT_FIELDS = (*CellRecord.model_fields, "kind", "worker", "started_at")


def _copied(row: dict[str, Any], run: str) -> CellResult:
    data = {k: row[k] for k in _RESULT_FIELDS if k in row}
    data["details"] = {**(row.get("details") or {}), "reused_from": run}
    return CellResult.model_validate(data)


def _changed(then: Mapping[str, Any], now: Mapping[str, str | None]) -> str | None:
    diff = [k for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k)]
    if not diff:
        return None
    shown = ", ".join(f"{k} ({then.get(k) or '-'} -> {now.get(k) or '-'})" for k in diff[:3])
    return "changed: " + shown + (f" (+{len(diff) - 3} more)" if len(diff) > 3 else "")


def _measured_params(params: Any) -> dict[str, Any]:
    """A cell's parameters without the scheduler's keys (a memory estimate is not what is measured)."""
    return {k: v for k, v in (params or {}).items() if k not in BUDGET_KEYS}


def why_not(spec: CellSpec, row: dict[str, Any] | None, env: Environment) -> str | None:
    """Why ``spec`` must run although the baseline has ``row`` (None: copy it)."""
    if row is None:
        return "not in the baseline"
    if unknown(row.get("outcome"), row.get("root_cause")):
        return f"not measured in the baseline ({row.get('outcome')})"
    if row.get("kind") != spec.kind.value or _measured_params(row.get("params")) != _measured_params(
        spec.params
    ):
        return "its parameters changed"
    rec = (row.get("details") or {}).get("reuse")
    if not isinstance(rec, dict) or not isinstance(rec.get("inputs"), dict):
        return "the baseline has no reuse record for it (measured by a probe without --reuse support)"
    now = env.cell_inputs(spec.kind.value, spec.params)
    return env.blocker(now) or _changed(rec["inputs"], now)


@dataclass(frozen=True)
class ReusePlan:
    """The cells copied from the baseline, and why each other cell runs."""

    reused: tuple[CellResult, ...]
    reasons: Mapping[str, str]


def plan_reuse(specs: Sequence[CellSpec], baseline: Baseline, env: Environment) -> ReusePlan:
    reused: list[CellResult] = []
    reasons: dict[str, str] = {}
    for spec in specs:
        row = baseline.cells.get(spec.id)
        why = why_not(spec, row, env)
        if why is not None or row is None:
            reasons[spec.id] = why or "not in the baseline"
            continue
        rec = row["details"]["reuse"]
        reused.append(_copied(row, str(row["details"].get("reused_from") or rec.get("run") or "?")))
    return ReusePlan(tuple(reused), reasons)
