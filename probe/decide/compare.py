"""What changed between two matrices: flipped cells, arches per file / kernel, versions, recommendations."""

from __future__ import annotations

import fnmatch
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.matrix.lazy import summaries
from probe.matrix.schema import Matrix
from probe.outcomes import unknown

if TYPE_CHECKING:
    from probe.recommend.types import LoadedEvidence

log = logging.getLogger(__name__)


@dataclass
class CellChange:
    id: str
    kind: str
    backend: str | None
    old: str | None  # outcome, None = absent
    new: str | None
    root_cause: str | None = None
    old_root_cause: str | None = None

    @property
    def unknown_now(self) -> bool:
        """The current result is unknown (not run, or stopped while JIT-compiling): no verdict."""
        return unknown(self.new, self.root_cause)

    @property
    def regression(self) -> bool:
        return self.old == "ok" and self.new not in (None, "ok", "skipped") and not self.unknown_now

    @property
    def fixed(self) -> bool:
        was_known = not unknown(self.old, self.old_root_cause)
        return self.old not in (None, "ok", "skipped") and was_known and self.new == "ok"


@dataclass
class ArchChange:
    path: str
    kernel: str | None
    gained: list[str]
    lost: list[str]


@dataclass
class RecChange:
    model: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    slowdown: float | None = None  # fraction, e.g. 0.25 = 25 % slower

    def pair(self, side: str) -> str | None:
        r = self.old if side == "old" else self.new
        if not r or not (r.get("attention_backend") or r.get("moe_backend")):
            return None
        fa = f" FA{r['fa_version']}" if r.get("fa_version") else ""
        extra = "".join(f" {k}={v}" for k, v in sorted((r.get("engine_args") or {}).items()))
        return f"{r.get('moe_backend') or '-'} + {r.get('attention_backend')}{fa}{extra}"


@dataclass
class Comparison:
    cells: list[CellChange] = field(default_factory=list)
    arches: list[ArchChange] = field(default_factory=list)
    versions: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    recommendations: list[RecChange] = field(default_factory=list)
    common_cells: int = 0
    baseline_cells: int = 0
    current_cells: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "common_cells": self.common_cells,
            "baseline_cells": self.baseline_cells,
            "current_cells": self.current_cells,
            "cells": [
                c.__dict__ | {"regression": c.regression, "fixed": c.fixed, "unknown": c.unknown_now}
                for c in self.cells
            ],
            "arches": [a.__dict__ for a in self.arches],
            "versions": {k: {"old": o, "new": n} for k, (o, n) in self.versions.items()},
            "recommendations": [
                {"model": r.model, "old": r.pair("old"), "new": r.pair("new"), "slowdown": r.slowdown}
                for r in self.recommendations
            ],
            "notes": self.notes,
        }


def _arch_map(m: Matrix) -> dict[tuple[str, str | None], set[str]]:
    out: dict[tuple[str, str | None], set[str]] = {}
    if m.static is None:
        return out
    for f in m.static.files:
        out[(f.path, None)] = set(f.arches)
        for k in f.kernels:
            out[(f.path, k.name)] = set(k.arches)
    return out


def _versions(m: Matrix) -> dict[str, str | None]:
    v = {
        f"{k}": (str(val) if val is not None else None)
        for k, val in m.provenance.versions.model_dump().items()
    }
    if m.static is not None:
        v.update({f"static:{k}": val for k, val in m.static.packages.items()})
    if m.provenance.image_digest:
        v["image_digest"] = m.provenance.image_digest
    return v


def evidence_of(m: Matrix) -> LoadedEvidence | None:
    """The recommender's evidence from one matrix alone (its cells' summaries, so a matrix read
    from a file is not read again; packaged field reports add warnings only); None without a GPU."""
    from probe.recommend.sources import evidence_versions, mark_superseded, matrix_cells, reported_cells
    from probe.recommend.types import LoadedEvidence

    if m.provenance.gpu is None or m.provenance.gpu.sm is None:
        return None
    doc = m.model_dump(mode="json", exclude={"cells"})
    doc["cells"] = summaries(m.cells)
    cells = matrix_cells(doc, Path("<matrix>"))
    cells += reported_cells(evidence_versions(cells), gpus=[m.provenance.gpu.sm])
    mark_superseded(cells)
    return LoadedEvidence(cells, ["<matrix>"])


def recommendation_for(
    m: Matrix, model: str, evidence: LoadedEvidence | None = None
) -> dict[str, Any] | None:
    """``recommend`` on one matrix alone (``evidence``: :func:`evidence_of` it, when already made)."""
    from probe.errors import UsageError
    from probe.recommend.recommender import recommend

    loaded = evidence if evidence is not None else evidence_of(m)
    if loaded is None or m.provenance.gpu is None:
        return None
    try:
        return recommend(model, gpu=str(m.provenance.gpu.sm), loaded=loaded).to_dict()
    except UsageError as exc:
        log.info("no recommendation for %s: %s", model, exc)
        return None


def _score(r: dict[str, Any] | None) -> tuple[str, float, bool] | None:
    """(metric, value, higher_is_better) of the recommended pair, from its own evidence."""
    if not r or not r.get("attention_backend"):
        return None
    ev = r.get("evidence") or []
    moe = [e for e in ev if e["role"] in ("moe", "engine") and e["outcome"] == "ok"]
    eng = [e for e in ev if e["role"] == "engine" and "tokens_per_s" in (e.get("timings") or {})]
    if eng:
        return "tokens_per_s", max(e["timings"]["tokens_per_s"] for e in eng), True
    if r.get("speed"):
        s = r["speed"]
        return s["metric"], s["best"], "tokens" in s["metric"]
    ms = [e["timings"].get("forward_ms_b1") for e in moe if e.get("timings", {}).get("forward_ms_b1")]
    att = [
        e["timings"].get("decode_ms")
        for e in ev
        if e["role"] == "attention" and e.get("timings", {}).get("decode_ms")
    ]
    if ms and att:
        return "ms", min(ms) + min(att), False
    return None


def _measured(m: Matrix) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in summaries(m.cells) if s.get("evidence", "measured") == "measured"}


def compare(old: Matrix, new: Matrix, *, models: list[str] | None = None) -> Comparison:
    cmp = Comparison()
    o_cells, n_cells = _measured(old), _measured(new)
    cmp.baseline_cells, cmp.current_cells = len(o_cells), len(n_cells)
    cmp.common_cells = len(o_cells.keys() & n_cells.keys())
    for cid in sorted(o_cells.keys() | n_cells.keys()):
        a, b = o_cells.get(cid), n_cells.get(cid)
        if a and b and a["outcome"] == b["outcome"] and a.get("degraded") == b.get("degraded"):
            continue
        ref = b or a
        assert ref is not None
        cmp.cells.append(
            CellChange(
                cid,
                ref["kind"],
                ref.get("backend"),
                a["outcome"] if a else None,
                b["outcome"] if b else None,
                (b.get("root_cause") if b else None),
                (a.get("root_cause") if a else None),
            )
        )
    del o_cells, n_cells
    _compare_static(cmp, old, new)
    _compare_recommendations(cmp, old, new, models)
    return cmp


def _compare_static(cmp: Comparison, old: Matrix, new: Matrix) -> None:
    oa, na = _arch_map(old), _arch_map(new)
    for key in sorted(oa.keys() | na.keys(), key=lambda k: (k[0], k[1] or "")):
        before, after = oa.get(key, set()), na.get(key, set())
        if before != after:
            cmp.arches.append(ArchChange(key[0], key[1], sorted(after - before), sorted(before - after)))
    ov, nv = _versions(old), _versions(new)
    for k in sorted(ov.keys() | nv.keys()):
        if ov.get(k) != nv.get(k):
            cmp.versions[k] = (ov.get(k), nv.get(k))


def _recommendations(m: Matrix, names: list[str]) -> dict[str, dict[str, Any] | None]:
    """``recommend`` for each model on one matrix; its evidence is made once and let go after."""
    evidence = evidence_of(m) if names else None
    return {model: recommendation_for(m, model, evidence) for model in names}


def _compare_recommendations(cmp: Comparison, old: Matrix, new: Matrix, models: list[str] | None) -> None:
    names = models if models is not None else default_models(old, new)
    recs_old = _recommendations(old, names)  # one matrix's evidence in memory at a time
    recs_new = _recommendations(new, names)
    for model in names:
        ro, rn = recs_old[model], recs_new[model]
        so, sn = _score(ro), _score(rn)
        slow = None
        if so and sn and so[0] == sn[0] and so[1] > 0 and sn[1] > 0:
            slow = (so[1] / sn[1] - 1.0) if so[2] else (sn[1] / so[1] - 1.0)
            slow = round(slow, 4)
        pair_o = RecChange(model, ro, rn).pair("old")
        pair_n = RecChange(model, ro, rn).pair("new")
        if pair_o is None and pair_n is None:
            continue
        cmp.recommendations.append(RecChange(model, ro, rn, slow))


def default_models(old: Matrix, new: Matrix) -> list[str]:
    """Models named by cells of either matrix, plus catalog models whose MoE shape a cell covers."""
    from probe.catalog.models import load_profiles

    names: list[str] = []
    cells = [s for m in (old, new) for s in summaries(m.cells)]
    shapes = {(c.get("experts"), c.get("hidden")) for c in cells if c["kind"] == "moe" and c.get("experts")}
    named = {c["model"] for c in cells if c.get("model")}
    for p in load_profiles():
        moe_shape = p.moe_shape(1)
        if p.name in named or (moe_shape and (moe_shape["experts"], moe_shape["hidden"]) in shapes):
            names.append(p.name)
    return names


def require_arch(m: Matrix, spec: str) -> tuple[str, list[str]]:
    """(arch, files/kernels matching the pattern that carry ``arch``) for ``sm_110a:<pattern>``."""
    from probe.errors import UsageError

    arch, sep, pattern = spec.partition(":")
    if not sep or not arch or not pattern:
        raise UsageError(f"--require-arch {spec!r}: expected ARCH:PATTERN, e.g. sm_110a:*_moe_C*")
    hits = []
    for (path, kernel), arches in _arch_map(m).items():
        name = f"{path}::{kernel}" if kernel else path
        if _match(pattern, path, kernel) and arch in arches:
            hits.append(name)
    return arch, sorted(hits)


def pattern_matches_any(m: Matrix, pattern: str) -> bool:
    return any(_match(pattern, path, kernel) for path, kernel in _arch_map(m))


def _match(pattern: str, path: str, kernel: str | None) -> bool:
    globby = any(ch in pattern for ch in "*?[")
    targets = [path, Path(path).name] + ([kernel] if kernel else [])
    if globby:
        return any(fnmatch.fnmatchcase(t, pattern) for t in targets)
    return any(pattern in t for t in targets)


def dumps(cmp: Comparison) -> str:
    return json.dumps(cmp.to_dict(), indent=1) + "\n"
