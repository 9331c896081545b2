"""Second round, the scan cache and the walk: a library rewritten in place (same size, mtime put back)
must not get the old answer; a cache another process holds locked must not be taken for corrupt; a
file swapped for a symlink between the walk and the read must not be read outside the folder named.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from probe.arch import scan_cache
from probe.arch.scan_cache import CACHE_FILE
from probe.arch.scanner import records_of, scan_paths
from probe.arch.walk import iter_candidates
from tests.hostile.harness import run_probe
from tests.hostile.inputs import PREBUILT


def _same_size_pair(tmp: Path) -> tuple[bytes, bytes]:
    """Two cubins of different arches padded to one size (trailing bytes: not read)."""
    a, b = (PREBUILT / "sm_90a.cubin").read_bytes(), (PREBUILT / "sm_120.cubin").read_bytes()
    n = max(len(a), len(b))
    return a + bytes(n - len(a)), b + bytes(n - len(b))


def _rewrite_in_place(path: Path, data: bytes) -> None:
    """Same inode, same size, the mtime put back (``touch -d``): only the ctime tells."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


@pytest.mark.parametrize("racy", [False, True], ids=["ctime", "racy-digest"])
def test_rewritten_in_place_with_size_and_mtime_kept(tmp_path, monkeypatch, racy):
    """``ctime``: the entry is keyed by the ctime, which a rewrite moves; ``racy-digest``: a file changed
    within the clock tick of the scan carries the digest of its content, checked on every hit."""
    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(scan_cache, "RACY_S", 1e12 if racy else 0.0)  # (racy: every entry)
    if racy:  # the ctime left as it was, as a rewrite within one tick of the kernel's clock leaves it
        real = scan_cache.stat_key

        def no_ctime(path: str, kernels: bool, member: str = "", expect: object = None) -> str | None:
            key = real(path, kernels, member, expect)  # type: ignore[arg-type]
            import json

            k = json.loads(key) if key else None
            return json.dumps([*k[:7], 0, *k[8:]]) if k else None

        monkeypatch.setattr(scan_cache, "stat_key", no_ctime)
    old, new = _same_size_pair(tmp_path)
    lib = tmp_path / "lib" / "k.cubin"
    lib.parent.mkdir()
    lib.write_bytes(old)
    first = scan_paths([lib], kernels=True)[0]
    assert first.entries[0].arch == "sm_90a" and not first.cached
    assert scan_paths([lib], kernels=True)[0].cached  # an unchanged file: from the cache
    _rewrite_in_place(lib, new)
    again = scan_paths([lib], kernels=True)[0]
    assert again.entries[0].arch == "sm_120" and not again.cached


def test_a_locked_cache_is_left_alone(tmp_path):
    """Another process holds the cache database locked (an open write transaction) past probe's
    timeout: probe scans uncached and leaves the file in place; the holder's commit then succeeds
    (before: the database was taken for corrupt and renamed away)."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    db = cache / CACHE_FILE
    holder = sqlite3.connect(db, isolation_level=None, timeout=0)
    holder.execute("CREATE TABLE records (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO records VALUES ('k', 'v')")
    try:
        r = run_probe(
            "scan",
            "--kernels",
            str(PREBUILT / "sm_90a.cubin"),
            timeout=60,
            env={**os.environ, "PROBE_CACHE_DIR": str(cache)},
        )
        r.check(0, seconds=60)
        assert not (cache / (CACHE_FILE + ".corrupt")).exists() and db.exists()
        holder.execute("COMMIT")
    finally:
        holder.close()
    assert sqlite3.connect(db).execute("SELECT value FROM records WHERE key = 'k'").fetchone() == ("v",)


def test_a_corrupt_cache_is_still_moved_aside(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path))
    (tmp_path / CACHE_FILE).write_bytes(b"not a database" * 100)
    c = scan_cache.ScanCache.open_default()
    assert c is not None and c.enabled
    c.close()
    assert (tmp_path / (CACHE_FILE + ".corrupt")).exists()


def _swap_for_link(path: Path, target: Path) -> None:
    path.unlink()
    path.symlink_to(target)


def test_a_file_swapped_for_a_symlink_after_the_walk_is_not_read(tmp_path):
    """The walk judged a regular file inside the root; before it is read, it becomes a symlink to a
    file outside (a check-then-open race): not followed (before: read outside the folder named)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    shutil.copy(PREBUILT / "sm_90a.cubin", root / "k.cubin")
    shutil.copy(PREBUILT / "sm_120.cubin", outside / "secret.cubin")
    (cand,) = list(iter_candidates([str(root)]))
    _swap_for_link(root / "k.cubin", outside / "secret.cubin")
    (rec,) = records_of(cand, False, None)
    assert rec.error is not None and "replaced while the scan ran" in rec.error and not rec.entries


def test_a_file_replaced_by_another_after_the_walk_is_not_read(tmp_path):
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    shutil.copy(PREBUILT / "sm_90a.cubin", root / "d" / "k.cubin")
    (cand,) = list(iter_candidates([str(root)]))
    os.replace(root / "d", tmp_path / "moved")  # the folder swapped: the path leads elsewhere
    (root / "d").symlink_to(tmp_path / "moved")
    shutil.copy(PREBUILT / "sm_120.cubin", tmp_path / "moved" / "k2.cubin")
    os.replace(tmp_path / "moved" / "k2.cubin", tmp_path / "moved" / "k.cubin")
    (rec,) = records_of(cand, False, None)
    assert rec.error is not None and "replaced while the scan ran" in rec.error


@pytest.mark.slow
def test_swapping_files_while_a_scan_runs(tmp_path):
    """A thread swaps files for symlinks to an outside file while whole scans run: no record ever
    describes the outside file under a path inside the root."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    shutil.copy(PREBUILT / "sm_120.cubin", outside / "secret.cubin")
    for i in range(200):
        shutil.copy(PREBUILT / "sm_90a.cubin", root / f"k{i}.cubin")
    stop = threading.Event()

    def swapper() -> None:
        i = 0
        while not stop.is_set():
            p = root / f"k{i % 200}.cubin"
            try:
                _swap_for_link(p, outside / "secret.cubin")
                time.sleep(0.0005)
                p.unlink()
                shutil.copy(PREBUILT / "sm_90a.cubin", p)
            except OSError:
                pass
            i += 1

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    try:
        for _ in range(20):
            for rec in scan_paths([root], use_cache=False):
                assert not any(e.arch == "sm_120" for e in rec.entries), rec.path
    finally:
        stop.set()
        t.join()


def test_a_folder_swapped_for_a_symlink_during_the_walk_is_not_walked(tmp_path):
    """The walk judged ``d`` a folder inside the root; before it is listed, it becomes a symlink to a
    folder outside: not listed (it is opened without following a link), a record says so."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    shutil.copy(PREBUILT / "sm_90a.cubin", root / "a.cubin")
    shutil.copy(PREBUILT / "sm_120.cubin", outside / "secret.cubin")
    walk = iter_candidates([str(root)])
    first = next(walk)
    assert first.path.endswith("a.cubin")
    (root / "d").rmdir()
    (root / "d").symlink_to(outside)
    rest = list(walk)
    assert [c.error for c in rest] == ["replaced by a symlink while the folder was walked: not followed"]
