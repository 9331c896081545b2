"""From scan records to loadability verdicts: the API the CLI and the backend view share.

- :func:`file_codes` — the loadable targets of a file (SASS + PTX of ``.nv_fatbin``, bare files);
- :func:`kernel_codes` — demangled kernel name -> the targets it exists in (needs ``--kernels``);
- :func:`verdict_for` — what the driver would pick on a GPU (:func:`probe.arch.compat.best`);
- :func:`container_coverage` — how many containers of a file load on a GPU;
- :func:`file_verdicts` — every (file [, kernel], target) verdict of a report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from probe.arch.compat import Code, Decision, best
from probe.arch.records import Entry, FileRecord, FileVerdict, TargetVerdict

if TYPE_CHECKING:
    from probe.catalog.gpus import Gpu

    AnyGpu = Gpu


def entry_code(entry: Entry) -> Code | None:
    """The :class:`Code` of an entry the driver can load, or None (relfatbin, LTO-IR, index ...)."""
    if not entry.loadable or entry.kind not in ("sass", "ptx"):
        return None
    return Code(
        "sass" if entry.kind == "sass" else "ptx",
        entry.sm,
        entry.suffix,
        entry.ptx_isa,
    )


def file_codes(record: FileRecord) -> list[Code]:
    """Sorted, de-duplicated loadable codes of a file (PTX keeps its newest ISA version per target)."""
    codes: dict[tuple[str, int, str], Code] = {}
    for e in record.entries:
        c = entry_code(e)
        if c is None:
            continue
        key = (c.kind, c.sm, c.suffix)
        old = codes.get(key)
        if old is None or _isa_key(c.ptx_isa) > _isa_key(old.ptx_isa):
            codes[key] = c
    return sorted(codes.values(), key=lambda c: (c.kind != "sass", c.sm, c.suffix))


def _isa_key(isa: str | None) -> tuple[int, int]:
    if not isa:
        return (0, 0)
    m = re.match(r"(\d+)\.(\d+)", isa)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def kernel_codes(record: FileRecord) -> dict[str, list[Code]]:
    """Demangled kernel name -> the loadable codes holding it. Empty unless scanned with kernels."""
    out: dict[str, list[Code]] = {}
    if not record.kernels:
        return out
    for k in record.kernels:
        codes = [Code.parse(label) for label in k.codes]
        out.setdefault(k.name, [])
        out[k.name] = sorted(set(out[k.name]) | set(codes), key=lambda c: (c.kind != "sass", c.sm, c.suffix))
    return out


def verdict_for(codes: Iterable[Code], gpu: AnyGpu) -> Decision:
    """The verdict the driver would reach on ``gpu`` for a set of codes."""
    return best(codes, gpu)


def container_coverage(record: FileRecord, gpu: AnyGpu) -> tuple[int, int]:
    """(containers with at least one entry loadable on ``gpu``, loadable containers in total)."""
    sets = container_code_sets(record)
    ok = sum(n for codes, n in sets.items() if best(codes, gpu).verdict.loadable)
    return ok, sum(sets.values())


def container_code_sets(record: FileRecord) -> dict[tuple[Code, ...], int]:
    """Distinct loadable code sets of a file's containers -> how many containers have each.

    A library with hundreds of containers has only a handful of distinct sets (libtorch_cuda.so:
    475 containers), so verdicts are decided per set, not per container.
    """
    by_container: dict[int, list[Code]] = {}
    for e in record.entries:
        c = entry_code(e)
        if c is not None:
            by_container.setdefault(e.container, []).append(c)
    sets: dict[tuple[Code, ...], int] = {}
    for codes in by_container.values():
        key = tuple(codes)
        sets[key] = sets.get(key, 0) + 1
    return sets


def labels(codes: Iterable[Code]) -> list[str]:
    return [c.label for c in codes]


def file_verdicts(
    files: Sequence[FileRecord], gpus: Sequence[AnyGpu], *, per_kernel: bool = False
) -> list[FileVerdict]:
    """One row per file with device code (and per kernel when ``per_kernel``), verdicts by target.

    Decisions are memoised by code set: thousands of cubins share a handful of target sets.
    """
    rows: list[FileVerdict] = []
    decisions: dict[tuple[tuple[Code, ...], int], Decision] = {}
    memo: dict[tuple[tuple[Code, ...], int, int, int], TargetVerdict] = {}

    def decide(codes: tuple[Code, ...], gpu: AnyGpu) -> Decision:
        d = decisions.get((codes, gpu.sm))
        if d is None:
            d = decisions[(codes, gpu.sm)] = verdict_for(codes, gpu)
        return d

    def verdict(codes: tuple[Code, ...], gpu: AnyGpu, cov: tuple[int, int] | None) -> TargetVerdict:
        key = (codes, gpu.sm, *(cov or (-1, -1)))
        tv = memo.get(key)
        if tv is None:
            d = decide(codes, gpu)
            tv = memo[key] = TargetVerdict(
                verdict=d.verdict.value,
                via=d.code.label if d.code else None,
                reason=d.reason,
                min_driver=d.min_driver,
                containers_loadable=cov[0] if cov else None,
                containers=cov[1] if cov else None,
            )
        return tv

    whole: dict[tuple[str, ...], dict[str, TargetVerdict]] = {}  # single-container files by code set
    for rec in files:
        codes = tuple(file_codes(rec))
        if not codes:
            continue
        simple = rec.containers <= 1
        key = tuple(f"{c.label}/{c.ptx_isa}" for c in codes)
        by_target = whole.get(key) if simple else None
        if by_target is None:
            by_target = {}
            sets = None if simple else container_code_sets(rec)
            for gpu in gpus:
                if sets is None:
                    cov = (1 if decide(codes, gpu).verdict.loadable else 0, 1)
                else:
                    cov = (
                        sum(n for cs, n in sets.items() if decide(cs, gpu).verdict.loadable),
                        sum(sets.values()),
                    )
                by_target[gpu.label] = verdict(codes, gpu, cov)
            if simple:
                whole[key] = by_target
        rows.append(FileVerdict(path=rec.path, targets=by_target))
        if per_kernel:
            for name, kc in kernel_codes(rec).items():
                rows.append(
                    FileVerdict(
                        path=rec.path,
                        kernel=name,
                        targets={g.label: verdict(tuple(kc), g, None) for g in gpus},
                    )
                )
    return rows
