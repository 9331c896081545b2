"""Find device code on disk and describe it: the engine behind ``probe scan``.

Library API (stable; the backend view builds on it)::

    from probe.arch.scan import scan_paths, default_roots, cache_roots, build_report
    files = scan_paths(["/venv/lib/python3.12/site-packages"], kernels=True)   # list[FileRecord]
    report = build_report(files, gpus)                                          # ScanReport

Inputs are files, folders (walked recursively, symlinked folders followed once, loops detected),
``.whl`` archives (members read straight from the zip, see :mod:`probe.arch.wheel`). Every file
yields one :class:`~probe.arch.model.FileRecord`; problems (unreadable, truncated, not ELF ...)
go into its ``error`` field, never into an exception.
"""

# ruff: noqa: PTH100, PTH112, PTH116, PTH118, PTH208
# (paths stay str on the scan's hot path: os.path is several times cheaper than pathlib)

from __future__ import annotations

import json
import logging
import os
import re
import site
import stat
import sys
import sysconfig
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from probe import __version__
from probe.arch import elf, fatbin
from probe.arch.model import Entry, FileRecord, KernelInfo, ScanReport, Summary, Target
from probe.errors import UsageError

if TYPE_CHECKING:
    from probe.catalog.gpus import Gpu

log = logging.getLogger(__name__)

#: names of files that may hold device code when met while walking a folder
DEVICE_FILE_RE = re.compile(r"(\.so(\.\d+)*|\.cubin|\.fatbin|\.ptx|\.whl)$")
SITE_DIR_NAMES = ("site-packages", "dist-packages")
MAX_PTX_FILE = 256 << 20
MAX_WALK_FILES = 5_000_000
#: files smaller than this are parsed faster than a cache lookup (unless --kernels)
CACHE_MIN_SIZE = 1 << 20
#: bytes read at once at the start of every file
HEAD_READ = 16 << 10


@dataclass(frozen=True)
class Candidate:
    path: str  # absolute path as found (not resolved)
    package: str | None = None
    error: str | None = None  # set when the file could not even be stat'ed
    size: int = -1  # from the walk's stat (-1: unknown)


# ----------------------------------------------------------------------------------------------
# one file


def _os_error(exc: OSError) -> str:
    import errno

    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOENT:
        return "file vanished or does not exist"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EISDIR:
        return "is a directory"
    return f"{exc.strerror or type(exc).__name__} (errno {exc.errno})"


def _open_file(path: str) -> int:
    """Seam for tests (monkeypatch to simulate unreadable files)."""
    return os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))


def scan_file(path: str, *, kernels: bool = False, package: str | None = None) -> FileRecord:
    """Describe one file on disk (never raises for a bad or unreadable file)."""
    rec = FileRecord(path=path, package=package)
    try:
        fd = _open_file(path)
    except OSError as exc:
        rec.error = _os_error(exc)
        return rec
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            rec.error = "is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            return rec
        rec.size = st.st_size
        # One read for the first HEAD_READ bytes: a cubin's ELF header and its .nv.compat /
        # .note.nv.* sections usually lie there (2 reads per cubin instead of 5).
        head = os.pread(fd, min(HEAD_READ, st.st_size), 0)
        reader = elf.Reader(_head_then_pread(fd, head), st.st_size)
        describe(reader, rec, name=path, kernels=kernels)
    except OSError as exc:
        rec.error = _os_error(exc)
    finally:
        os.close(fd)
    return rec


def _head_then_pread(fd: int, head: bytes) -> Callable[[int, int], bytes]:
    end = len(head)

    def read(off: int, n: int) -> bytes:
        if off + n <= end:
            return head[off : off + n]
        return os.pread(fd, n, off)

    return read


def describe(reader: elf.Reader, rec: FileRecord, *, name: str, kernels: bool) -> None:
    """Fill ``rec`` (kind, containers, entries, error) from the bytes behind ``reader``."""
    rec.size = reader.size
    if reader.size == 0:
        rec.error = "empty file"
        return
    head = reader.read_upto(0, 64)
    try:
        if elf.is_elf(head):
            hdr = elf.parse_header(reader, head)
            if hdr.is_cuda:
                rec.kind = "cubin"
                _describe_cubin(reader, rec, kernels, hdr)
            else:
                rec.kind = "elf"
                _describe_host_elf(reader, rec, kernels)
        elif fatbin.is_container_start(head):
            rec.kind = "fatbin"
            res = fatbin.walk_region(reader, 0, reader.size, section="fatbin")
            _add_walk(reader, rec, res, kernels)
        elif name.endswith(".ptx"):
            rec.kind = "ptx"
            _describe_ptx(reader, rec, kernels)
        else:
            rec.kind = "other"
            rec.error = "not an ELF file" if head[:4] != elf.ELF_MAGIC else "unrecognised content"
    except elf.ElfParseError as exc:
        rec.error = str(exc)
    except fatbin.FatbinParseError as exc:
        rec.error = str(exc)


def _describe_host_elf(reader: elf.Reader, rec: FileRecord, kernels: bool) -> None:
    problems: list[str] = []
    for sec in elf.device_sections(reader):
        res = fatbin.walk_region(
            reader,
            sec.offset,
            sec.offset + sec.size,
            section=sec.name,
            first_container=rec.containers + rec.relocatable_containers,
        )
        _add_walk(reader, rec, res, kernels)
        problems.extend(res.problems)
    if problems and not rec.error:
        rec.error = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")


def _add_walk(reader: elf.Reader, rec: FileRecord, res: fatbin.WalkResult, kernels: bool) -> None:
    if res.entries and res.entries[0].section == "__nv_relfatbin":
        rec.relocatable_containers += res.containers
    else:
        rec.containers += res.containers
    for raw in res.entries:
        rec.entries.append(entry_from_raw(raw, reader if kernels else None))
    if res.problems and not rec.error:
        rec.error = "; ".join(res.problems[:5])
    if kernels:
        rec.kernels = kernel_index(rec.entries)


def entry_from_raw(raw: fatbin.RawEntry, reader: elf.Reader | None) -> Entry:
    loadable = raw.section in (".nv_fatbin", "fatbin") and raw.kind in ("sass", "ptx")
    e = Entry(
        section=raw.section,
        container=raw.container,
        kind=raw.kind,
        arch=raw.label,
        sm=raw.arch,
        suffix=raw.suffix,
        ptx_isa=raw.ptx_isa,
        code_version=f"{raw.major}.{raw.minor}" if raw.kind == "sass" else None,
        compression=raw.compression,
        loadable=loadable,
        size=raw.payload_length or raw.padded_size,
        uncompressed_size=raw.uncompressed_size or None,
        offset=raw.offset,
        flags=raw.flags,
        nested=raw.nested,
        identifier=raw.identifier,
    )
    if reader is not None and raw.kind in ("sass", "ptx") and not raw.nested:
        try:
            data = fatbin.payload(reader, raw)
            e.kernels = elf.cubin_kernels(data) if raw.kind == "sass" else fatbin.ptx_kernels(data)
        except (fatbin.FatbinParseError, elf.ElfParseError) as exc:
            e.kernels_error = str(exc)
    return e


def kernel_index(entries: Iterable[Entry]) -> list[KernelInfo]:
    """Mangled kernel -> the loadable codes holding it (relocatable copies are left out)."""
    from probe.arch.demangle import demangle  # ctypes: only with --kernels

    codes: dict[str, set[str]] = {}
    for e in entries:
        if e.kernels is None:
            continue
        for k in e.kernels:
            s = codes.setdefault(k, set())
            if e.loadable and e.arch:
                s.add(e.arch)
    return sorted(
        (KernelInfo(name=demangle(k), mangled=k, codes=sorted(v, key=_label_key)) for k, v in codes.items()),
        key=lambda ki: ki.name,
    )


def _label_key(label: str) -> tuple[int, int, str]:
    m = re.match(r"(sm|compute)_(\d+)(\w?)", label)
    return (0 if label.startswith("sm") else 1, int(m.group(2)), m.group(3)) if m else (2, 0, label)


def _describe_cubin(
    reader: elf.Reader, rec: FileRecord, kernels: bool, hdr: elf.ElfHeader | None = None
) -> None:
    info = elf.cubin_info(reader, hdr)
    e = Entry(
        section="cubin",
        container=0,
        kind="sass",
        arch=f"sm_{info.sm}{info.suffix}",
        sm=info.sm,
        suffix=info.suffix,
        code_version=str(info.abi_version),
        loadable=info.e_type != elf.ET_REL,
        size=reader.size,
        offset=0,
        flags=info.e_flags,
        toolkit=info.toolkit,
    )
    if kernels:
        try:
            e.kernels = elf.cubin_kernels(reader.read(0, reader.size))
        except elf.ElfParseError as exc:
            e.kernels_error = str(exc)
    rec.entries.append(e)
    if kernels:
        rec.kernels = kernel_index(rec.entries)


_PTX_TARGET = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def _describe_ptx(reader: elf.Reader, rec: FileRecord, kernels: bool) -> None:
    if reader.size > MAX_PTX_FILE:
        rec.error = f"PTX file larger than {MAX_PTX_FILE >> 20} MiB: not read"
        return
    text = reader.read(0, reader.size)
    target = fatbin.ptx_target(text)
    version = fatbin.ptx_version(text)
    m = _PTX_TARGET.match(target or "")
    if not m or not version:
        rec.error = "not a PTX file (no .version / .target directive)"
        return
    sm, suffix = int(m.group(2)), m.group(3)
    e = Entry(
        section="ptx",
        container=0,
        kind="ptx",
        arch=f"compute_{sm}{suffix}",
        sm=sm,
        suffix=suffix,
        ptx_isa=version,
        loadable=True,
        size=reader.size,
        offset=0,
    )
    if kernels:
        e.kernels = fatbin.ptx_kernels(text)
    rec.entries.append(e)
    if kernels:
        rec.kernels = kernel_index(rec.entries)


# ----------------------------------------------------------------------------------------------
# where to look


def _python_site_dirs_code() -> str:
    return (
        "import json,site,sysconfig\n"
        "p=[sysconfig.get_paths().get(k) for k in ('purelib','platlib')]\n"
        "try: p+=site.getsitepackages()\nexcept Exception: pass\n"
        "try: p.append(site.getusersitepackages())\nexcept Exception: pass\n"
        "print(json.dumps([x for x in p if x]))"
    )


def default_roots(python: str | None = None, *, timeout: float = 60.0) -> list[str]:
    """Site-packages folders of the running interpreter, or of ``python`` (asked in a subprocess)."""
    if python is None:
        dirs: list[str] = [sysconfig.get_paths().get(k) or "" for k in ("purelib", "platlib")]
        try:
            dirs += site.getsitepackages()
        except AttributeError:  # old virtualenv's site module
            pass
        try:
            dirs.append(site.getusersitepackages())
        except AttributeError:
            pass
    else:
        import subprocess

        try:
            out = subprocess.run(
                [python, "-c", _python_site_dirs_code()],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError:
            raise UsageError(f"--python {python}: no such interpreter") from None
        except PermissionError:
            raise UsageError(f"--python {python}: not executable") from None
        except subprocess.TimeoutExpired:
            raise UsageError(f"--python {python}: did not answer within {timeout:.0f} s") from None
        except OSError as exc:
            raise UsageError(f"--python {python}: cannot run it: {exc}") from None
        if out.returncode != 0:
            raise UsageError(
                f"--python {python}: exited with {out.returncode}: "
                f"{out.stderr.strip().splitlines()[-1:] or ''}"
            )
        try:
            dirs = [str(d) for d in json.loads(out.stdout.strip().splitlines()[-1])]
        except (ValueError, IndexError):
            raise UsageError(f"--python {python}: unexpected answer {out.stdout[:200]!r}") from None
    seen: set[str] = set()
    roots: list[str] = []
    for d in dirs:
        if not d or not os.path.isdir(d):
            continue
        real = os.path.realpath(d)
        if real in seen:
            continue
        seen.add(real)
        roots.append(os.path.abspath(d))
    return roots


def cache_roots(site_dirs: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Known JIT / kernel caches that exist here: ``(folder, label)``.

    FlashInfer JIT cache (``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer``, default
    ``~/.cache/flashinfer``) and ``$FLASHINFER_CUBIN_DIR``; the flashinfer-cubin and
    flashinfer-jit-cache package trees of ``site_dirs``; the torch extension cache
    (``$TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``); the Triton cache
    (``$TRITON_CACHE_DIR``, default ``~/.triton/cache``).
    """
    home = Path.home()
    env = os.environ
    out: list[tuple[str, str]] = []
    fi_base = env.get("FLASHINFER_WORKSPACE_BASE")
    out.append(
        (
            str(Path(fi_base) / ".cache" / "flashinfer") if fi_base else str(home / ".cache" / "flashinfer"),
            "flashinfer-jit-cache-dir",
        )
    )
    if env.get("FLASHINFER_CUBIN_DIR"):
        out.append((env["FLASHINFER_CUBIN_DIR"], "flashinfer-cubin-dir"))
    for sd in site_dirs:
        out.append((os.path.join(sd, "flashinfer_cubin", "cubins"), "flashinfer-cubin"))
        out.append((os.path.join(sd, "flashinfer_jit_cache", "jit_cache"), "flashinfer-jit-cache"))
    out.append(
        (env.get("TORCH_EXTENSIONS_DIR") or str(home / ".cache" / "torch_extensions"), "torch-extensions")
    )
    out.append((env.get("TRITON_CACHE_DIR") or str(home / ".triton" / "cache"), "triton-cache"))
    seen: set[str] = set()
    found = []
    for d, label in out:
        if os.path.isdir(d) and os.path.realpath(d) not in seen:
            seen.add(os.path.realpath(d))
            found.append((os.path.abspath(d), label))
    return found


class PackageResolver:
    """Distribution name of a file under a site-packages folder, from the ``*.dist-info/RECORD``
    files (read once per folder, device-code paths only), else its top-level folder name."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, str]] = {}

    def _index(self, site_dir: str) -> dict[str, str]:
        idx = self._records.get(site_dir)
        if idx is not None:
            return idx
        idx = {}
        try:
            names = os.listdir(site_dir)
        except OSError:
            names = []
        for n in names:
            if not n.endswith(".dist-info"):
                continue
            dist = n[: -len(".dist-info")].split("-")[0].replace("_", "-").lower()
            try:
                with open(os.path.join(site_dir, n, "RECORD"), encoding="utf-8", errors="replace") as f:
                    for line in f:
                        rel = line.split(",", 1)[0]
                        if DEVICE_FILE_RE.search(rel):
                            idx.setdefault(os.path.normpath(rel), dist)
            except OSError:
                continue
        self._records[site_dir] = idx
        return idx

    def package_of(self, path: str) -> str | None:
        for marker in SITE_DIR_NAMES:
            i = path.rfind(os.sep + marker + os.sep)
            if i >= 0:
                site_dir = path[: i + len(marker) + 1]
                rel = path[i + len(marker) + 2 :]
                top = rel.split(os.sep, 1)[0].split(".")[0]
                return self._index(site_dir).get(os.path.normpath(rel)) or top or None
        return None


def iter_candidates(paths: Sequence[str], *, labels: dict[str, str] | None = None) -> Iterator[Candidate]:
    """Files to scan under ``paths``; each physical file once; errors become candidates too."""
    resolver = PackageResolver()
    labels = labels or {}
    seen_files: set[tuple[int, int]] = set()
    seen_dirs: set[tuple[int, int]] = set()
    count = 0

    def pkg(p: str, root: str) -> str | None:
        return labels.get(root) or resolver.package_of(p)

    for raw in paths:
        root = os.path.abspath(os.fspath(raw))
        try:
            st = os.stat(root)
        except OSError as exc:
            yield Candidate(root, pkg(root, root), _os_error(exc))
            continue
        if not stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key not in seen_files:
                seen_files.add(key)
                yield Candidate(root, pkg(root, root), size=st.st_size)
            continue
        stack = [root]
        while stack:
            d = stack.pop()
            try:
                dst = os.stat(d)
            except OSError as exc:
                yield Candidate(d, pkg(d, root), _os_error(exc))
                continue
            if (dst.st_dev, dst.st_ino) in seen_dirs:
                log.debug("already visited (symlink cycle or duplicate): %s", d)
                continue
            seen_dirs.add((dst.st_dev, dst.st_ino))
            try:
                with os.scandir(d) as it:
                    items = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                yield Candidate(d, pkg(d, root), _os_error(exc))
                continue
            subdirs = []
            for ent in items:
                try:
                    is_dir = ent.is_dir(follow_symlinks=True)
                except OSError:
                    is_dir = False
                if is_dir:
                    subdirs.append(ent.path)
                    continue
                if not DEVICE_FILE_RE.search(ent.name):
                    continue
                try:
                    fst = ent.stat(follow_symlinks=True)
                except OSError as exc:
                    yield Candidate(ent.path, pkg(ent.path, root), _os_error(exc))
                    continue
                key = (fst.st_dev, fst.st_ino)
                if key in seen_files:
                    continue
                seen_files.add(key)
                count += 1
                if count > MAX_WALK_FILES:
                    log.warning("more than %d files: stopping the walk", MAX_WALK_FILES)
                    return
                yield Candidate(ent.path, pkg(ent.path, root), size=fst.st_size)
            stack.extend(reversed(subdirs))


# ----------------------------------------------------------------------------------------------
# many files


def _scan_candidate(c: Candidate, kernels: bool, cache: object | None) -> list[FileRecord]:
    try:
        return _scan_candidate_inner(c, kernels, cache)
    except Exception as exc:  # a bug in probe must not end a scan of thousands of files
        log.debug("unexpected failure on %s", c.path, exc_info=True)
        return [FileRecord(path=c.path, package=c.package,
                           error=f"internal error while reading (a probe bug): {type(exc).__name__}: {exc}")]


def _scan_candidate_inner(c: Candidate, kernels: bool, cache: object | None) -> list[FileRecord]:
    if c.error:
        return [FileRecord(path=c.path, package=c.package, error=c.error)]
    if c.path.endswith(".whl"):
        from probe.arch.wheel import scan_wheel

        return scan_wheel(c.path, kernels=kernels, cache=cache)
    key = None
    if cache is not None and (kernels or c.size < 0 or c.size >= CACHE_MIN_SIZE):
        from probe.arch.cache import stat_key

        key = stat_key(c.path, kernels)
        hit = cache.get_many(key) if key else None  # type: ignore[attr-defined]
        if hit is not None and len(hit) == 1:
            hit[0].package = c.package
            return hit
    rec = scan_file(c.path, kernels=kernels, package=c.package)
    if cache is not None and key:
        cache.put_many(key, [rec])  # type: ignore[attr-defined]
    return [rec]


def scan_paths(
    paths: Sequence[str | os.PathLike[str]],
    *,
    kernels: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
    labels: dict[str, str] | None = None,
) -> list[FileRecord]:
    """Scan files / folders / wheels; one record per file (wheel: per member), in walk order.

    ``labels`` maps a root folder to the package label given to everything under it (caches).
    """
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
        return [_scan_candidate(c, kernels, cache) for c in batch]

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
    return [r for recs in per_candidate for r in recs]


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


def target_of(gpu: Gpu, source: str) -> Target:
    return Target(target=gpu.label, cc=gpu.cc, name=gpu.names[0], source=source)


def build_report(
    files: Sequence[FileRecord],
    gpus: Sequence[Gpu],
    *,
    source: str = "argument",
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
        targets=[target_of(g, source) for g in gpus],
        verdicts=file_verdicts(files, gpus, per_kernel=per_kernel),
    )


def timed_scan(paths: Sequence[str], **kw: object) -> tuple[list[FileRecord], float]:
    t0 = time.perf_counter()
    files = scan_paths(paths, **kw)  # type: ignore[arg-type]
    return files, time.perf_counter() - t0


def running_python() -> str:
    return sys.executable
