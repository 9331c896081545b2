"""The walk of the files and folders given to ``probe scan``: the files to read (:class:`Candidate`),
each physical file once, and nothing outside what was named.

Bounds (a walk of ``/`` or ``/proc`` ends, and reads nothing it should not):

- **links stay inside the roots**: a symlink (to a folder or a file) is followed only when its
  target lies inside one of the roots given; a file named like device code whose link leads out
  gets a record with an error instead ("not followed"), links to folders outside are counted in
  one warning. ``probe scan /proc`` never follows ``/proc/*/cwd`` or ``/proc/*/root`` into ``/``.
- **pseudo file systems are not walked unless named**: ``/proc``, ``/sys``, ``/dev`` and every
  mount of a kernel pseudo file system (proc, sysfs, devtmpfs, cgroup …, from
  ``/proc/self/mountinfo``) are skipped when met inside a root; naming one (``probe scan /proc``)
  walks it.
- **only regular files are read**: a FIFO, socket or device named like device code gets a record
  with an error from its ``stat`` — it is never opened.
- **what is read is what was judged**: each candidate carries the identity (device, inode) of the
  file the walk judged, and the file opened for reading must be that one (a file swapped for a
  symlink after the walk looked — a check-then-open race — is opened without following it, and one
  replaced otherwise is refused: a record saying it changed during the scan); a folder is listed
  through the descriptor opened for it, without following a symlink it became.
- at most :data:`MAX_WALK_FILES` files.
"""

# ruff: noqa: PTH100, PTH116, PTH118
# (paths stay str on the scan's hot path: os.path is several times cheaper than pathlib)

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from probe.arch.describe import os_error
from probe.arch.roots import DEVICE_FILE_RE, PackageResolver
from probe.userfile import describe_mode

log = logging.getLogger(__name__)

MAX_WALK_FILES = 5_000_000
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_SWAPPED = "replaced by a symlink while the folder was walked: not followed"
PSEUDO_DIRS = ("/proc", "/sys", "/dev")
#: kernel file systems whose files are not files: not walked unless a root lies on one
PSEUDO_FS = frozenset(
    (
        "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
        "pstore", "bpf", "configfs", "fusectl", "mqueue", "hugetlbfs", "efivarfs", "binfmt_misc",
        "autofs", "rpc_pipefs", "nsfs", "selinuxfs",
    )
)  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    path: str  # absolute path as found (not resolved)
    package: str | None = None
    error: str | None = None  # set when the file is not read (cannot be stat'ed, special, outside)
    size: int = -1  # from the walk's stat (-1: unknown)
    ident: tuple[int, int] | None = None  # (device, inode) the walk judged: the file opened must be it
    nofollow: bool = False  # not a symlink when judged: opened without following one


def pseudo_devices(mountinfo: str = "/proc/self/mountinfo") -> frozenset[int]:
    """Device numbers of the mounted pseudo file systems (empty when mountinfo cannot be read)."""
    devs = set()
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                left, sep, right = line.partition(" - ")
                fields, fstype = left.split(), right.split()[:1]
                if sep and len(fields) > 2 and fstype and fstype[0] in PSEUDO_FS:
                    major, _, minor = fields[2].partition(":")
                    if major.isdigit() and minor.isdigit():
                        devs.add(os.makedev(int(major), int(minor)))
    except OSError:
        pass
    return frozenset(devs)


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r if r.endswith("/") else r + "/") for r in roots)


class _Walk:
    """One walk over the paths given (see the module docstring)."""

    def __init__(self, labels: dict[str, str] | None) -> None:
        self.resolver = PackageResolver()
        self.labels = labels or {}
        self.seen_files: set[tuple[int, int]] = set()
        self.seen_dirs: set[tuple[int, int]] = set()
        self.count = 0
        self.real_roots: list[str] = []
        self.pseudo = pseudo_devices()
        self.allowed_devs: set[int] = set()  # pseudo file systems a root lies on: walked
        self.links_out: list[str] = []

    def pkg(self, p: str, root: str) -> str | None:
        return self.labels.get(root) or self.resolver.package_of(p)

    def skipped_dir(self, d: str, st: os.stat_result) -> bool:
        """A pseudo file system met inside a root that does not lie on it."""
        if st.st_dev in self.allowed_devs:
            return False
        named = any(_inside(r, (d,)) for r in self.real_roots)  # a root is the folder or inside it
        return st.st_dev in self.pseudo or (d in PSEUDO_DIRS and not named)

    def walk_dir(self, root: str) -> Iterator[Candidate]:
        stack: list[tuple[str, bool]] = [(root, False)]  # (folder, no symlink when listed)
        while stack:
            d, nofollow = stack.pop()
            try:  # the folder listed is the one judged: opened without following a link it became
                fd = os.open(d, _DIR_FLAGS | (getattr(os, "O_NOFOLLOW", 0) if nofollow else 0))
            except OSError as exc:
                err = _SWAPPED if nofollow and exc.errno in (errno.ELOOP, errno.ENOTDIR) else os_error(exc)
                yield Candidate(d, self.pkg(d, root), err)
                continue
            try:
                yield from self._listed(fd, d, root, stack)
            finally:
                os.close(fd)
            if self.count > MAX_WALK_FILES:
                log.warning("more than %d files: stopping the walk", MAX_WALK_FILES)
                return

    def _listed(self, fd: int, d: str, root: str, stack: list[tuple[str, bool]]) -> Iterator[Candidate]:
        """The candidates of the open folder ``fd`` (at ``d``); its subfolders go on ``stack``."""
        dst = os.fstat(fd)
        if (dst.st_dev, dst.st_ino) in self.seen_dirs or (d != root and self.skipped_dir(d, dst)):
            log.debug("not walked (visited, or a pseudo file system): %s", d)
            return
        self.seen_dirs.add((dst.st_dev, dst.st_ino))
        try:
            with os.scandir(fd) as it:  # (entries are looked at through fd: the folder opened)
                items = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            yield Candidate(d, self.pkg(d, root), os_error(exc))
            return
        subdirs: list[tuple[str, bool]] = []
        for ent in items:
            yield from self.entry(ent, os.path.join(d, ent.name), root, subdirs)
            if self.count > MAX_WALK_FILES:
                return
        stack.extend(reversed(subdirs))

    def entry(
        self, ent: os.DirEntry[str], path: str, root: str, subdirs: list[tuple[str, bool]]
    ) -> Iterator[Candidate]:
        """The candidate of one folder entry (at ``path``), if any; a folder to walk goes to ``subdirs``."""
        outside = None
        link = False
        try:
            link = ent.is_symlink()
            if link:
                target = os.path.realpath(path)
                outside = None if _inside(target, self.real_roots) else target
            is_dir = ent.is_dir(follow_symlinks=True)
        except OSError:
            is_dir = False
        if is_dir:
            if outside is None:
                subdirs.append((path, not link))
            else:
                self.links_out.append(f"{path} -> {outside}")
            return
        if not DEVICE_FILE_RE.search(ent.name):
            return
        if outside is not None:
            err = f"symlink to {outside}, outside the folders scanned: not followed (name it to scan it)"
            yield Candidate(path, self.pkg(path, root), err)
            return
        try:  # not a link when listed: lstat (a link swapped in since is not followed here)
            fst = ent.stat(follow_symlinks=link)
        except OSError as exc:
            yield Candidate(path, self.pkg(path, root), os_error(exc))
            return
        if not link and stat.S_ISLNK(fst.st_mode):
            yield Candidate(path, self.pkg(path, root), _SWAPPED)
            return
        key = (fst.st_dev, fst.st_ino)
        if key in self.seen_files:
            return
        self.seen_files.add(key)
        self.count += 1
        what = describe_mode(fst.st_mode)
        if what is not None:
            yield Candidate(path, self.pkg(path, root), f"{what}, not a regular file: not read")
            return
        yield Candidate(path, self.pkg(path, root), size=fst.st_size, ident=key, nofollow=not link)

    def warn_links_out(self) -> None:
        if self.links_out:
            log.warning(
                "%d symlinked folder(s) lead outside the folders scanned and were not followed (first: %s)",
                len(self.links_out),
                self.links_out[0],
            )


def iter_candidates(paths: Sequence[str], *, labels: dict[str, str] | None = None) -> Iterator[Candidate]:
    """Files to scan under ``paths``; each physical file once; errors become candidates too."""
    w = _Walk(labels)
    roots = [os.path.abspath(os.fspath(raw)) for raw in paths]
    w.real_roots = [os.path.realpath(r) for r in roots]
    for root in roots:
        try:
            st = os.stat(root)
        except OSError as exc:
            yield Candidate(root, w.pkg(root, root), os_error(exc))
            continue
        if not stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key not in w.seen_files:
                w.seen_files.add(key)
                what = describe_mode(st.st_mode)
                err = f"{what}, not a regular file: not read" if what else None
                yield Candidate(root, w.pkg(root, root), err, size=st.st_size, ident=key)
            continue
        w.allowed_devs.add(st.st_dev)
        yield from w.walk_dir(root)
    w.warn_links_out()
