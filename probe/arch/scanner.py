"""Scan files, folders, wheels and container images for device code: the engine behind ``probe scan``.

Library API (stable; the backend view builds on it)::

    from probe.arch.scanner import scan_paths, scan_inputs, default_roots, cache_roots, build_report
    files = scan_paths(["/venv/lib/python3.12/site-packages"], kernels=True)   # list[FileRecord]
    report = build_report(files, gpus)                                          # ScanReport
    res = scan_inputs(["image.tar"])       # ScanResult: .files, .environments (image inputs)

Inputs are files, folders (walked recursively by :mod:`probe.arch.walk`: symlinked folders
followed once, and only when they lead inside the roots; loops detected), ``.whl`` archives
(members read straight from the zip, see :mod:`probe.arch.wheel`) and container images
(:mod:`probe.arch.image`, imported only when an input is one). Every file yields one
:class:`~probe.arch.records.FileRecord` (:mod:`probe.arch.describe`); problems (unreadable,
truncated, not ELF ...) go into its ``error`` field, never into an exception. :func:`scan_inputs`
picks images among the inputs, :func:`records_of` the reader for each walked file;
``package_version`` comes from the ``*.dist-info`` folders (:mod:`probe.arch.dists`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from probe import __version__
from probe.arch.describe import scan_file
from probe.arch.dists import SiteVersions, wheel_version
from probe.arch.inputs import looks_like_image
from probe.arch.records import Environment, FileRecord, ScanReport, Summary, Target, TargetSource
from probe.arch.roots import cache_roots, default_roots
from probe.arch.walk import Candidate, iter_candidates

if TYPE_CHECKING:
    from probe.arch.scan_cache import ScanCache
    from probe.catalog.gpus import Gpu

__all__ = [
    "ScanResult",
    "build_report",
    "cache_roots",
    "default_roots",
    "records_of",
    "scan_file",
    "scan_inputs",
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

        return scan_wheel(c.path, kernels=kernels, cache=cache, expect=c.ident)
    return [_file_record(c, kernels, cache)]


def _file_record(c: Candidate, kernels: bool, cache: ScanCache | None) -> FileRecord:
    key = None
    if cache is not None and (kernels or c.size < 0 or c.size >= CACHE_MIN_SIZE):
        from probe.arch.scan_cache import stat_key

        key = stat_key(c.path, kernels, expect=c.ident)  # (another file there now: not from the cache)
        hit = cache.get_many(key) if key else None
        if hit is not None and len(hit) == 1:
            hit[0].package = c.package
            return hit[0]
    rec = scan_file(c.path, kernels=kernels, package=c.package, expect=c.ident, nofollow=c.nofollow)
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


@dataclass
class ScanResult:
    """What :func:`scan_inputs` found: the records, and the Python environments of image inputs
    (None when no image was given)."""

    files: list[FileRecord]
    environments: list[Environment] | None = None


def scan_paths(
    paths: Sequence[str | os.PathLike[str]],
    *,
    kernels: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
    labels: dict[str, str] | None = None,
    platform: str | None = None,
) -> list[FileRecord]:
    """Scan files / folders / wheels / images; one record per file (wheel: per member), in walk
    order (see :func:`scan_inputs`)."""
    return scan_inputs(
        paths, kernels=kernels, use_cache=use_cache, jobs=jobs, labels=labels, platform=platform
    ).files


def scan_inputs(
    paths: Sequence[str | os.PathLike[str]],
    *,
    kernels: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
    labels: dict[str, str] | None = None,
    platform: str | None = None,
) -> ScanResult:
    """Scan files / folders / wheels / images; one record per file (wheel: per member), in walk order.

    ``labels`` maps a root folder to the package label given to everything under it (caches).
    The per-input dispatch: container images (docker-save / OCI tarballs, OCI layout folders;
    :func:`probe.arch.inputs.looks_like_image`) are read by :mod:`probe.arch.image`, imported only
    then (``platform``: which image of a multi-platform index); their records come first.
    Everything else is walked (:func:`probe.arch.walk.iter_candidates`) and read by
    :func:`records_of`.
    """
    images: list[str] = []
    rest: list[str] = []
    for p in (os.fspath(x) for x in paths):
        (images if looks_like_image(p) else rest).append(p)
    files: list[FileRecord] = []
    envs: list[Environment] | None = None
    if images:
        from probe.arch.image import scan_image  # tar / zstd / layouts: only when an image is given

        envs = []
        for p in images:
            res = scan_image(p, kernels=kernels, platform=platform, use_cache=use_cache)
            files += res.files
            envs += res.environments
    if rest:
        files += _scan_walked(rest, kernels=kernels, use_cache=use_cache, jobs=jobs, labels=labels)
    return ScanResult(files, envs)


def _scan_walked(
    paths: list[str], *, kernels: bool, use_cache: bool, jobs: int | None, labels: dict[str, str] | None
) -> list[FileRecord]:
    cache = None
    if use_cache:
        from probe.arch.scan_cache import ScanCache

        cache = ScanCache.open_default()
    candidates = list(iter_candidates(paths, labels=labels))
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
    _add_versions(candidates, per_candidate)
    return [r for recs in per_candidate for r in recs]


def _add_versions(candidates: list[Candidate], per_candidate: list[list[FileRecord]]) -> None:
    """``package_version`` of each record: a wheel's from its file name, a file's from the
    ``*.dist-info`` folders of the site folder holding it (:mod:`probe.arch.dists`)."""
    versions = SiteVersions()
    for c, recs in zip(candidates, per_candidate, strict=True):
        if c.path.endswith(".whl"):
            v = wheel_version(c.path)
            for r in recs:
                r.package_version = v if r.package else None
            continue
        for r in recs:
            r.package_version = versions.version_of(r.path, r.package)


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
    environments: list[Environment] | None = None,
) -> ScanReport:
    """Assemble the JSON report: files, summary, targets and every verdict (``environments``:
    those of image inputs, :attr:`ScanResult.environments`)."""
    from probe.arch.verdicts import file_verdicts

    return ScanReport(
        probe_version=__version__,
        roots=list(roots),
        environments=environments,
        files=list(files),
        summary=summarize(files, seconds),
        targets=[_target_of(g, source) for g in gpus],
        verdicts=file_verdicts(files, gpus, per_kernel=per_kernel),
    )
