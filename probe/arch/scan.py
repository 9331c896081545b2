"""Scan files, folders and wheels for device code: the engine behind ``probe scan``.

Library API (stable; the backend view builds on it)::

    from probe.arch.scan import scan_paths, default_roots, cache_roots, build_report
    files = scan_paths(["/venv/lib/python3.12/site-packages"], kernels=True)   # list[FileRecord]
    report = build_report(files, gpus)                                          # ScanReport

Inputs are files, folders (walked recursively by :mod:`probe.arch.roots`: symlinked folders
followed once, loops detected) and ``.whl`` archives (members read straight from the zip, see
:mod:`probe.arch.wheel`). Every file yields one :class:`~probe.arch.records.FileRecord`
(:mod:`probe.arch.describe`); problems (unreadable, truncated, not ELF ...) go into its ``error``
field, never into an exception. :func:`records_of` is the one place that picks the reader for an
input kind.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from probe import __version__
from probe.arch.describe import scan_file
from probe.arch.records import FileRecord, ScanReport, Summary, Target, TargetSource
from probe.arch.roots import Candidate, cache_roots, default_roots, iter_candidates

if TYPE_CHECKING:
    from probe.arch.cache import ScanCache
    from probe.catalog.gpus import Gpu

__all__ = [
    "build_report",
    "cache_roots",
    "default_roots",
    "records_of",
    "scan_file",
    "scan_paths",
    "summarize",
]

log = logging.getLogger(__name__)

#: files smaller than this are parsed faster than a cache lookup (unless --kernels)
CACHE_MIN_SIZE = 1 << 20


def records_of(c: Candidate, kernels: bool, cache: ScanCache | None) -> list[FileRecord]:
    """The records of one input: the dispatch on its kind (a wheel: one record per member;
    anything else: one record, from the cache when the file is unchanged)."""
    if c.error:
        return [FileRecord(path=c.path, package=c.package, error=c.error)]
    if c.path.endswith(".whl"):
        from probe.arch.wheel import scan_wheel  # zipfile / threads: only when a wheel is scanned

        return scan_wheel(c.path, kernels=kernels, cache=cache)
    return [_file_record(c, kernels, cache)]


def _file_record(c: Candidate, kernels: bool, cache: ScanCache | None) -> FileRecord:
    key = None
    if cache is not None and (kernels or c.size < 0 or c.size >= CACHE_MIN_SIZE):
        from probe.arch.cache import stat_key

        key = stat_key(c.path, kernels)
        hit = cache.get_many(key) if key else None
        if hit is not None and len(hit) == 1:
            hit[0].package = c.package
            return hit[0]
    rec = scan_file(c.path, kernels=kernels, package=c.package)
    if cache is not None and key:
        cache.put_many(key, [rec])
    return rec


def _guarded_records_of(c: Candidate, kernels: bool, cache: ScanCache | None) -> list[FileRecord]:
    try:
        return records_of(c, kernels, cache)
    except Exception as exc:  # a bug in probe must not end a scan of thousands of files
        log.debug("unexpected failure on %s", c.path, exc_info=True)
        return [
            FileRecord(
                path=c.path,
                package=c.package,
                error=f"internal error while reading (a probe bug): {type(exc).__name__}: {exc}",
            )
        ]


def scan_paths(
    paths: Sequence[str | os.PathLike[str]],
    *,
    kernels: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
    labels: dict[str, str] | None = None,
    platform: str | None = None,
) -> list[FileRecord]:
    """Scan files / folders / wheels; one record per file (wheel: per member), in walk order.

    ``labels`` maps a root folder to the package label given to everything under it (caches).
    Container images (docker-save / OCI tarballs, OCI layout folders) are read by
    :mod:`probe.arch.image` (``platform``: which image of a multi-platform index); their records come first.
    """
    from probe.arch.image import is_image, scan_image

    images = [os.fspath(p) for p in paths if is_image(os.fspath(p))]
    image_files = [
        f
        for p in images
        for f in scan_image(p, kernels=kernels, platform=platform, use_cache=use_cache).files
    ]
    paths = [p for p in paths if os.fspath(p) not in images]
    cache = None
    if use_cache:
        from probe.arch.cache import ScanCache

        cache = ScanCache.open_default()
    candidates = list(iter_candidates([os.fspath(p) for p in paths], labels=labels))
    if jobs is None:
        # Header reads are GIL-bound: threads only pay off where the work releases the GIL
        # (zlib for wheels, zstd/lz4 for --kernels).
        heavy = kernels or any(c.path.endswith(".whl") for c in candidates)
        jobs = min(4, os.cpu_count() or 1) if heavy else 1
    size = 256 if len(candidates) > 1024 else 1 if jobs > 1 else 256
    batches = [candidates[i : i + size] for i in range(0, len(candidates), size)]

    def run(batch: list[Candidate]) -> list[list[FileRecord]]:
        return [_guarded_records_of(c, kernels, cache) for c in batch]

    per_candidate: list[list[FileRecord]] = []
    try:
        if jobs <= 1 or len(batches) <= 1:
            for b in batches:
                per_candidate.extend(run(b))
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=jobs) as pool:
                for part in pool.map(run, batches):
                    per_candidate.extend(part)
    finally:
        if cache is not None:
            cache.close()
    return image_files + [r for recs in per_candidate for r in recs]


# ----------------------------------------------------------------------------------------------
# report


def summarize(files: Sequence[FileRecord], seconds: float | None = None) -> Summary:
    s = Summary(files=len(files), seconds=round(seconds, 3) if seconds is not None else None)
    for f in files:
        if f.entries:
            s.with_device_code += 1
        if f.error:
            s.errors += 1
        if f.cached:
            s.cached += 1
        s.containers += f.containers
        s.entries += len(f.entries)
        key = f.package or "-"
        s.packages[key] = s.packages.get(key, 0) + 1
        if f.entries:
            s.packages_with_device_code[key] = s.packages_with_device_code.get(key, 0) + 1
    return s


def _target_of(gpu: Gpu, source: TargetSource) -> Target:
    return Target(target=gpu.label, cc=gpu.cc, name=gpu.names[0], source=source)


def build_report(
    files: Sequence[FileRecord],
    gpus: Sequence[Gpu],
    *,
    source: TargetSource = "argument",
    per_kernel: bool = False,
    roots: Sequence[str] = (),
    seconds: float | None = None,
) -> ScanReport:
    """Assemble the JSON report: files, summary, targets and every verdict."""
    from probe.arch.verdicts import file_verdicts

    return ScanReport(
        probe_version=__version__,
        roots=list(roots),
        files=list(files),
        summary=summarize(files, seconds),
        targets=[_target_of(g, source) for g in gpus],
        verdicts=file_verdicts(files, gpus, per_kernel=per_kernel),
    )
