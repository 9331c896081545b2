"""What a run will do before it does it: the cells in order of value with their estimates, which ones are
copied from a baseline, which ones wait for (or are) a JIT compile, and what the budget leaves out.
``probe run --dry-run`` prints it (:func:`render`); :func:`probe.run.run_plan` runs it."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from probe.cells import CellResult, CellSpec
from probe.run.estimates import PREPASS_DEFAULT_S, WORKER_START_S, Estimates, history, load_estimates
from probe.run.order import Priorities, by_value, tier_label

if TYPE_CHECKING:
    from probe.run.reuse import Environment

log = logging.getLogger(__name__)


class PlanRequest(Protocol):
    """What a plan is made of (:class:`probe.run.RunOptions` is one)."""

    @property
    def cells(self) -> tuple[CellSpec, ...]: ...
    @property
    def priorities(self) -> Priorities | None: ...
    @property
    def estimates(self) -> tuple[str, ...]: ...  # journals / matrices of earlier runs
    @property
    def reuse(self) -> str | None: ...  # a baseline journal or matrix
    @property
    def warm_jit(self) -> bool: ...
    @property
    def budget_s(self) -> float | None: ...  # the whole run's time budget


@dataclass(frozen=True)
class PlannedCell:
    spec: CellSpec
    tier: int
    estimate_s: float
    basis: str  # journal / journal group / default
    jit: str | None  # the pre-pass cell it waits for, or what it compiles itself
    why: str | None = None  # why it runs although a baseline was given


@dataclass(frozen=True)
class PlannedWarm:
    spec: CellSpec
    estimate_s: float
    note: str
    waiting: int  # cells that wait for it
    skip: str | None = None  # why it is not started (a compile the budget cannot hold), with the way out


#: how to have a JIT module without compiling it in the run, per pre-pass cell kind
BUILD_AHEAD = {
    "flashinfer_moe": "build it ahead (python3 scripts/flashinfer_aot.py on a CPU host, docs/scripts.md) or "
    "use an image with flashinfer-jit-cache; a run without a budget builds it once into the JIT cache",
    "attention": "run once without a budget (or with --warm-jit and a longer one): the JIT cache keeps it",
}


def compile_skip(w: CellSpec, seconds: float, budget_s: float | None) -> str | None:
    """Why a pre-pass compile is not started: it needs more than the run's whole budget."""
    if budget_s is None or seconds <= budget_s:
        return None
    how = BUILD_AHEAD["flashinfer_moe" if "flashinfer_moe" in w.params else "attention"]
    return f"needs ~{_fmt_s(seconds)} of compiling, the budget is {_fmt_s(budget_s)}: not started; {how}"


@dataclass(frozen=True)
class RunPlan:
    cells: tuple[PlannedCell, ...]  # to run, in order
    reused: tuple[CellResult, ...] = ()
    warm: tuple[PlannedWarm, ...] = ()
    environment: Environment | None = None
    estimates: Estimates = field(default_factory=Estimates)
    notes: tuple[str, ...] = ()
    gpu: Mapping[str, Any] = field(default_factory=dict)  # nvidia-smi's answer (``matrix.build.nvidia_smi``)

    @property
    def tiers(self) -> dict[str, int]:
        return {c.spec.id: c.tier for c in self.cells}

    @property
    def cell_s(self) -> float:
        return sum(c.estimate_s for c in self.cells)

    def worker_starts(self) -> int:
        """Warm workers the cells will start (one per environment of non-isolated cells)."""
        return len({tuple(sorted(c.spec.env.items())) for c in self.cells if not c.spec.isolate})


def compiles_itself(spec: CellSpec) -> str | None:
    """What a cell compiles at first use by its backend's nature (the backend catalog's ``mode``;
    FLASH_ATTN per FA version: FA2 / FA3 ship compiled, FA4 does not; no version: any of them)."""
    from probe.catalog.backends import catalog

    kind = spec.kind.value
    if kind not in ("moe", "attention"):
        return None
    name, fa = spec.params.get("backend"), spec.params.get("fa_version")
    found = [b for b in catalog().records(kind) if b.name == name]
    if fa:
        found = [b for b in found if b.fa_version == fa] or found
    modes = {b.mode for b in found}
    return next((what for mode, what in _COMPILES if mode in modes), None)


_COMPILES = (("jit", "JIT module"), ("pure-triton", "Triton kernels"), ("python", "CuTe DSL kernels"))


def _warm_estimate(w: CellSpec, est: Estimates, cached: str | None) -> tuple[float, str]:
    if w.id in est.by_id:
        return est.by_id[w.id], "from the journals given"
    if "flashinfer_moe" in w.params:
        if cached:
            return PREPASS_DEFAULT_S["warm/flashinfer-moe (cached)"], f"built already: {cached}"
        return PREPASS_DEFAULT_S["warm/flashinfer-moe"], "FlashInfer's CUTLASS MoE module, not built yet"
    return PREPASS_DEFAULT_S["attention"], "an attention layout's first forward"


def flashinfer_moe_built(site_dirs: Sequence[str], sm: int | None) -> str | None:
    """Where FlashInfer's CUTLASS MoE module for ``sm`` is already built (AOT in the package, the
    flashinfer-jit-cache package, or the JIT cache), else None."""
    from probe.probes.jit_warm import moe_spec_name
    from probe.sandbox.jit import cache_dirs

    name = moe_spec_name(sm) if sm else None
    if name is None:
        return None
    module = name.replace("gen_cutlass_", "").replace("_module", "")  # fused_moe_sm90 -> fused_moe_90
    module = module.replace("_sm", "_")
    roots = [Path(s) / "flashinfer" / "data" / "aot" for s in site_dirs]
    roots += [Path(s) / "flashinfer_jit_cache" / "jit_cache" for s in site_dirs]
    for root in roots:
        if (root / module / f"{module}.so").is_file():
            return str(root / module)
    jit_root = cache_dirs()["flashinfer"]
    for hit in jit_root.glob(f"*/*/cached_ops/{module}/{module}.so") if jit_root.is_dir() else []:
        return str(hit.parent)
    return None


def plan_cells(
    specs: Sequence[CellSpec],
    prio: Priorities | None,
    est: Estimates,
    needs: dict[str, str],
    reasons: dict[str, str],
) -> tuple[PlannedCell, ...]:
    ordered, tiers = by_value(specs, prio) if prio is not None else (list(specs), {s.id: 0 for s in specs})
    out = []
    for s in ordered:
        seconds, basis = est.of(s)
        jit = f"waits for {needs[s.id]}" if s.id in needs else compiles_itself(s)
        out.append(PlannedCell(multi_gpu_deadline(s, seconds, basis), tiers[s.id], seconds, basis, jit,
                               reasons.get(s.id)))  # fmt: skip
    return tuple(out)


#: a multi-GPU engine's limit from history: this many times what it took, within these bounds (s)
DEADLINE_FACTOR, DEADLINE_MIN_S = 4.0, 300.0


def multi_gpu_deadline(spec: CellSpec, seconds: float, basis: str) -> CellSpec:
    """A tensor- or data-parallel engine cell's limit from measured history (4x its estimate, at least
    5 min, never above its own): a rank that hangs stops the cell, and every rank with it, in minutes,
    not at 15."""
    gpus = (spec.params.get("tensor_parallel_size") or 1) * (spec.params.get("data_parallel_size") or 1)
    if spec.kind.value != "engine" or gpus <= 1 or basis == "default":
        return spec
    limit = min(spec.timeout_s, max(DEADLINE_MIN_S, DEADLINE_FACTOR * seconds))
    return spec if limit >= spec.timeout_s else spec.model_copy(update={"timeout_s": round(limit, 1)})


def make_plan(
    opts: PlanRequest, env: Environment | None, gpu: Mapping[str, Any], site_dirs: Sequence[str]
) -> RunPlan:
    """The plan of ``opts`` (reuse decided against ``env``; the pre-pass when ``opts.warm_jit``)."""
    from probe.matrix.schema import cc_to_sm
    from probe.probes.jit_warm import warm_needs, warm_specs
    from probe.run.prepass import START_S

    sm = cc_to_sm(gpu.get("cc"))
    est = load_estimates(opts.estimates) if opts.estimates else history()
    specs = list(opts.cells)
    notes = list(opts.priorities.notes if opts.priorities else ())
    reused: tuple[CellResult, ...] = ()
    reasons: dict[str, str] = {}
    if opts.reuse:
        from probe.run.reuse import load_baseline, plan_reuse

        assert env is not None
        decided = plan_reuse(specs, load_baseline(opts.reuse), env)
        reused, reasons = decided.reused, dict(decided.reasons)
        copied = {r.id for r in reused}
        specs = [s for s in specs if s.id not in copied]
    needs = warm_needs(specs, sm) if opts.warm_jit else {}
    warm = []
    if opts.warm_jit:
        built = flashinfer_moe_built(site_dirs, sm)
        for w in warm_specs(specs, limit_s=START_S, sm=sm):
            seconds, note = _warm_estimate(w, est, built)
            waiting = sum(1 for v in needs.values() if v == w.id)
            warm.append(PlannedWarm(w, seconds, note, waiting, compile_skip(w, seconds, opts.budget_s)))
    cells = plan_cells(specs, opts.priorities, est, needs, reasons)
    return RunPlan(cells, reused, tuple(warm), env, est, tuple(notes), dict(gpu))


def _fmt_s(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def skipped_waits(plan: RunPlan) -> dict[str, str]:
    """Cells that wait for a pre-pass compile the budget does not start: cell id -> the pre-pass id."""
    skipped = {w.spec.id for w in plan.warm if w.skip}
    return {c.spec.id: c.jit.removeprefix("waits for ") for c in plan.cells
            if c.jit and c.jit.removeprefix("waits for ") in skipped}  # fmt: skip


def budget_line(plan: RunPlan, budget_s: float | None, jobs: int) -> tuple[int | None, str]:
    """(index of the first cell the budget does not reach, the summary line). A warm worker's start is
    counted where its first cell comes in the order; cells waiting for a compile the budget does not
    start cost nothing (they are not_run)."""
    starts = plan.worker_starts() * WORKER_START_S
    total = (plan.cell_s + starts) / max(1, jobs)
    line = (
        f"{len(plan.cells)} cells to run: ~{_fmt_s(plan.cell_s)} of cells + {plan.worker_starts()} worker "
        f"start(s) ~{_fmt_s(starts)}" + (f", ~{_fmt_s(total)} at -j {jobs}" if jobs > 1 else "")
    )
    if budget_s is None:
        return None, line
    dropped = skipped_waits(plan)
    spent, workers = 0.0, set()
    for i, c in enumerate(plan.cells):
        if c.spec.id in dropped:
            continue
        key = tuple(sorted(c.spec.env.items()))
        if not c.spec.isolate and key not in workers:
            workers.add(key)
            spent += WORKER_START_S / max(1, jobs)
        spent += c.estimate_s / max(1, jobs)
        if spent > budget_s:
            rest = len(plan.cells) - i
            return i, line + f"; budget {_fmt_s(budget_s)}: ~{i} cells fit, {rest} would be not_run"
    return None, line + f"; budget {_fmt_s(budget_s)}: all fit"


def render(plan: RunPlan, budget_s: float | None, jobs: int, out: Any = sys.stdout) -> None:
    """The plan as ``probe run --dry-run`` prints it."""
    for note in plan.notes:
        print(f"note: {note}", file=out)
    if plan.reused:
        runs = sorted({str(r.details.get("reused_from")) for r in plan.reused})
        print(f"reused: {len(plan.reused)} cells copied from run(s) {', '.join(runs)}", file=out)
    for w in plan.warm:
        if w.skip:
            print(f"JIT pre-pass: {w.spec.id} ({w.note}) {w.skip}; {w.waiting} cell(s) waiting for it "
                  "are not_run", file=out)  # fmt: skip
            continue
        print(f"JIT pre-pass (beside the cells): {w.spec.id} ~{_fmt_s(w.estimate_s)} ({w.note}); "
              f"{w.waiting} cell(s) wait for it", file=out)  # fmt: skip
    cut, summary = budget_line(plan, budget_s, jobs)
    dropped = skipped_waits(plan)
    print(f"{'#':>5} {'est':>7}  {'basis':<13} {'JIT':<34} {'value tier':<42} cell", file=out)
    for i, c in enumerate(plan.cells):
        if i == cut:
            print(f"{'':>5} --- the budget ends about here: the cells below would be not_run ---", file=out)
        jit = (c.jit or "-").replace("waits for warm/", "waits: ")
        why = f"  [runs: {c.why}]" if c.why else ""
        why += "  [not_run: its compile is not started]" if c.spec.id in dropped else ""
        print(f"{i + 1:>5} {c.estimate_s:>6.1f}s  {c.basis:<13} {jit:<34} {tier_label(c.tier):<42} "
              f"{c.spec.id}{why}", file=out)  # fmt: skip
    print(summary, file=out)


def load_plan_file(path: str | Path) -> list[CellSpec]:
    """Cells of a plan file: a JSON list of ``CellSpec`` objects (or ``{"cells": [...]}``)."""
    from pydantic import ValidationError

    from probe.cells import CellSpec
    from probe.errors import BadInputError
    from probe.userfile import read_json

    data = read_json(path, what="plan file")  # a regular file, bounded in size and nesting
    cells = data.get("cells") if isinstance(data, dict) else data
    if not isinstance(cells, list):
        raise BadInputError(f'plan file {path} must hold a JSON list of cells (or {{"cells": [...]}})')
    try:
        return [CellSpec.model_validate(c) for c in cells]
    except ValidationError as exc:
        raise BadInputError(f"plan file {path} has an invalid cell: {exc}")
