"""How one backend requirement becomes a verdict on one GPU: the rules behind the backend view.

A requirement of ``probe/data/backends.json`` names files (globs) and kernel-name patterns; the
scanned files that match are grouped into units (a kernel, or a whole file when kernel names were
not read), each unit is decided with :mod:`probe.arch.compat`, and the requirement takes the weakest
(``aggregate: all``) or best unit of its best kernel-name alternative. A variant takes the weakest
requirement, then vLLM's compute-capability gate. :mod:`probe.arch.backend_view` builds the view and
its tables from these cells.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from probe.arch.compat import Code, Decision, best
from probe.arch.records import FileRecord
from probe.arch.verdicts import file_codes
from probe.catalog.backends import Backend
from probe.catalog.gpus import Gpu
from probe.catalog.scan_rules import Requirement, Variant

RANK: dict[str, int] = {
    "sass": 6,
    "sass-compatible": 5,
    "ptx-jit": 4,
    "pure": 3,
    "jit": 2,
    "not-installed": 1,
    "none": 0,
}
_SAMPLE = 3  # kernel / file names kept as evidence per requirement


@dataclass
class RequirementResult:
    what: str
    check: str
    required: bool
    verdict: str  # one of RANK, or "present" for a satisfied host-only file check
    reason: str
    via: str | None = None  # code the driver would pick (weakest/best unit)
    min_driver: str | None = None
    files: list[str] = field(default_factory=list)
    matched_kernels: int | None = None
    evidence: list[dict[str, object]] = field(default_factory=list)
    file_level: bool = False  # judged per file because kernel names were not read


@dataclass
class BackendRow:
    backend: str  # id, e.g. "moe.marlin"
    name: str  # as vLLM spells it
    kind: str
    label: str
    variant: str
    primary: bool
    target: str  # "sm_90"
    verdict: str
    code_verdict: str
    gate_ok: bool
    gate: str
    reason: str
    requirements: list[RequirementResult]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# file matching


def _rel_path(path: str) -> str:
    """The path used for glob matching; wheel members are matched inside the wheel."""
    if "!" in path:
        path = path.split("!", 1)[1]
    return "/" + path.replace("\\", "/").strip("/")


@functools.lru_cache(maxsize=512)
def _glob_re(glob: str) -> re.Pattern[str]:
    parts = [p for p in glob.split("/") if p]
    body = "/".join(
        fnmatch.translate(p).removeprefix("(?s:").removesuffix(")\\Z").replace(".*", "[^/]*") for p in parts
    )
    return re.compile(f"/{body}$")


def path_matches(path: str, glob: str) -> bool:
    """True when the last components of ``path`` match ``glob`` (``*`` never crosses ``/``)."""
    return _glob_re(glob).search(_rel_path(path)) is not None


class Index:
    """The scanned files, with per-requirement file matches and per-GPU decisions memoised."""

    def __init__(self, files: Sequence[FileRecord]) -> None:
        self.files = list(files)
        self._rel = [_rel_path(f.path) for f in self.files]
        self._match: dict[str, list[FileRecord]] = {}
        self._decisions: dict[tuple[tuple[Code, ...], int], Decision] = {}
        self._units: dict[int, tuple[list[list[Unit]], bool]] = {}
        self._codes: dict[tuple[str, ...], tuple[Code, ...]] = {}

    def matching(self, glob: str) -> list[FileRecord]:
        if glob not in self._match:
            rx = _glob_re(glob)
            self._match[glob] = [f for f, rel in zip(self.files, self._rel, strict=True) if rx.search(rel)]
        return self._match[glob]

    def units(self, req: Requirement, recs: Sequence[FileRecord]) -> tuple[list[list[Unit]], bool]:
        key = id(req)
        got = self._units.get(key)
        if got is None:
            got = self._units[key] = _units(req, recs, self._codes)
        return got

    def decide(self, codes: Iterable[Code], gpu: Gpu) -> Decision:
        key = (tuple(codes), gpu.sm)
        d = self._decisions.get(key)
        if d is None:
            d = best(key[0], gpu)
            self._decisions[key] = d
        return d


# ---------------------------------------------------------------------------------------------
# evaluation


def _find_files(req: Requirement, idx: Index) -> tuple[list[FileRecord], list[FileRecord], str | None]:
    """(usable records, records with errors, the glob that matched) — first alternative that matches."""
    for alt in req.files:
        recs = idx.matching(alt.glob)
        if recs:
            return [r for r in recs if r.error is None], [r for r in recs if r.error is not None], alt.glob
    return [], [], None


Unit = tuple[str, str | None, tuple[Code, ...]]


def _parse_codes(
    labels: Sequence[str], by_label: dict[str, Code], memo: dict[tuple[str, ...], tuple[Code, ...]]
) -> tuple[Code, ...]:
    """Codes of a kernel from its labels; PTX keeps the ISA version of the file's entry (min driver)."""
    key = tuple(labels)
    got = memo.get(key)
    if got is None:
        out = []
        for label in key:
            code = by_label.get(label)
            if code is None:
                try:
                    code = Code.parse(label)
                except ValueError:
                    continue
            out.append(code)
        got = memo[key] = tuple(out)
    return got


def _units(
    req: Requirement,
    recs: Sequence[FileRecord],
    memo: dict[tuple[str, ...], tuple[Code, ...]],
) -> tuple[list[list[Unit]], bool]:
    """What must load, per kernel-name alternative: (path, kernel name or None, codes) units; and
    whether some file was judged as a whole because its kernel names were not read."""
    file_level = False
    if not req.kernel_res:
        return [[(rec.path, None, tuple(file_codes(rec))) for rec in recs]], False
    alts: list[list[Unit]] = [[] for _ in req.kernel_res]
    for rec in recs:
        if rec.kernels is None:
            codes = tuple(file_codes(rec))
            if codes:
                file_level = True
                for units in alts:
                    units.append((rec.path, None, codes))
            continue
        by_label = {c.label: c for c in file_codes(rec)}
        # PTX ISA versions are per file: a private memo keeps them apart
        has_isa = any(c.ptx_isa for c in by_label.values())
        rec_memo: dict[tuple[str, ...], tuple[Code, ...]] = {} if has_isa else memo
        for k in rec.kernels:
            for rx, units in zip(req.kernel_res, alts, strict=True):
                if rx.search(k.name) or rx.search(k.mangled):
                    units.append((rec.path, k.name, _parse_codes(k.codes, by_label, rec_memo)))
    return alts, file_level


def _aggregate(decided: list[tuple[Unit, Decision]], how: str) -> tuple[Unit, Decision]:
    if how == "all":
        return min(decided, key=lambda ud: (ud[1].verdict.rank, -(ud[1].code.sm if ud[1].code else 0)))
    return max(decided, key=lambda ud: (ud[1].verdict.rank, ud[1].code.sm if ud[1].code else 0))


def _no_files(req: Requirement, res: RequirementResult, unreadable: int) -> RequirementResult:
    """The verdict when no file the requirement names was found (JIT-compiled, or not installed)."""
    if req.check == "jit":
        res.verdict = "jit"
        res.reason = req.toolchain or "compiled at first use"
        return res
    res.verdict = "not-installed"
    wanted = " or ".join(a.glob for a in req.files)
    res.reason = f"no {wanted} among the scanned files"
    if unreadable:
        res.reason += f" ({unreadable} unreadable)"
    if req.if_missing:
        res.reason += f"; {req.if_missing}"
    return res


def _best_alternative(
    candidates: list[list[Unit]], idx: Index, gpu: Gpu, aggregate: str
) -> tuple[int, list[tuple[Unit, Decision]], tuple[Unit, Decision], dict[int, int]]:
    """The kernel-name alternative with the best aggregated verdict: its index, its decided units
    (one representative per distinct set of codes), the deciding unit, and each unit's weight."""
    best: tuple[int, list[tuple[Unit, Decision]], tuple[Unit, Decision], dict[int, int]] | None = None
    for i, units in enumerate(candidates):
        groups: dict[tuple[Code, ...], list[Unit]] = {}
        for u in units:
            groups.setdefault(u[2], []).append(u)
        decided = [(us[0], idx.decide(codes, gpu)) for codes, us in groups.items()]
        weights = {id(us[0]): len(us) for us in groups.values()}
        pick = _aggregate(decided, aggregate)
        if best is None or pick[1].verdict.rank > best[2][1].verdict.rank:
            best = (i, decided, pick, weights)
    assert best is not None
    return best


def evaluate_requirement(req: Requirement, idx: Index, gpu: Gpu) -> RequirementResult:
    res = RequirementResult(what=req.what, check=req.check, required=req.required, verdict="none", reason="")
    if req.check in ("pure-triton", "python"):
        res.verdict = "pure"
        res.reason = req.toolchain or ""
        return res

    recs, broken, glob = _find_files(req, idx)
    res.files = [r.path for r in recs][:_SAMPLE] + [f"{r.path} (error: {r.error})" for r in broken][:_SAMPLE]
    if req.check == "present":
        if recs:
            res.verdict, res.reason = "present", f"found {recs[0].path}"
        else:
            res.verdict = "not-installed"
            res.reason = f"no {' or '.join(a.glob for a in req.files)} among the scanned files"
            if req.if_missing:
                res.reason += f"; {req.if_missing}"
        return res

    if not recs:
        return _no_files(req, res, len(broken))

    alts, file_level = idx.units(req, recs)
    res.file_level = file_level
    candidates = [units for units in alts if units]
    res.matched_kernels = sum(1 for units in alts for u in units if u[1] is not None)
    if not candidates:
        if req.check == "jit":
            res.verdict, res.reason = "jit", (req.toolchain or "compiled at first use")
            return res
        pats = " | ".join(f"/{rx.pattern}/" for rx in req.kernel_res)
        what = f"kernel matching {pats}" if pats else "device code"
        res.verdict = "none"
        res.reason = f"no {what} in {len(recs)} file(s) matching {glob}"
        return res

    alt_i, decided, pick, best_weights = _best_alternative(candidates, idx, gpu, req.aggregate)
    (path, kernel, _codes), d = pick
    res.via = d.code.label if d.code else None
    res.min_driver = d.min_driver
    res.evidence = _evidence(decided, pick)
    n_ok = sum(best_weights[id(u)] for u, dd in decided if dd.verdict.loadable)
    n_all = sum(best_weights.values())
    unit_word = "kernels" if kernel is not None else "files"
    where = f"{kernel} in {path}" if kernel else path
    if req.check == "jit" and not d.verdict.loadable:
        res.verdict = "jit"
        res.reason = (
            f"{n_all} prebuilt module(s) found, none loadable on {gpu.label}: "
            f"{req.toolchain or 'compiled at first use'}"
        )
        return res
    res.verdict = d.verdict.value
    word = "weakest" if req.aggregate == "all" else "best"
    alt_note = f" (kernel alternative {alt_i + 1}/{len(candidates)})" if len(candidates) > 1 else ""
    res.reason = f"{n_ok}/{n_all} {unit_word} loadable{alt_note}; {word}: {where}: {d.reason}"
    if file_level:
        res.reason += " (judged per file: scan with --kernels for per-kernel evidence)"
    return res


def _evidence(decided: list[tuple[Unit, Decision]], pick: tuple[Unit, Decision]) -> list[dict[str, object]]:
    """A few units as evidence: the deciding one first, then others with a different verdict."""
    out: list[dict[str, object]] = []
    seen: set[str] = set()
    for (path, kernel, codes), d in [pick, *decided]:
        key = f"{path}\0{kernel}"
        if key in seen or len(out) >= _SAMPLE:
            continue
        if out and d.verdict.value in {str(o["verdict"]) for o in out}:
            continue
        seen.add(key)
        out.append(
            {
                "path": path,
                "kernel": kernel,
                "codes": [c.label for c in codes],
                "verdict": d.verdict.value,
                "via": d.code.label if d.code else None,
            }
        )
    return out


def _combine(results: Sequence[RequirementResult]) -> tuple[str, str]:
    """Weakest required requirement -> (verdict, reason)."""
    counted = [r for r in results if r.required and r.verdict != "present"]
    if not counted:
        return "pure", "no device code needed ahead of time"
    weakest = min(counted, key=lambda r: RANK[r.verdict])
    return weakest.verdict, f"{weakest.what}: {weakest.reason}"


def evaluate_variant(
    backend: Backend, variant: Variant, idx: Index, gpu: Gpu, *, primary: bool
) -> BackendRow:
    results = [evaluate_requirement(r, idx, gpu) for r in variant.requirements]
    code_verdict, reason = _combine(results)
    assert backend.scan is not None
    gate = variant.gate or backend.scan.gate
    gate_ok = gate.allows(gpu.sm)
    verdict = code_verdict
    if not gate_ok:
        verdict = "none"
        reason = f"vLLM gate: {gate.text} ({gate.source}); code alone: {code_verdict}"
    return BackendRow(
        backend=backend.id,
        name=backend.name,
        kind=backend.kind,
        label=backend.label,
        variant=variant.name,
        primary=primary,
        target=gpu.label,
        verdict=verdict,
        code_verdict=code_verdict,
        gate_ok=gate_ok,
        gate=gate.text,
        reason=reason,
        requirements=results,
    )
