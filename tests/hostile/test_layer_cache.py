"""The layer cache cannot be poisoned: every layer's digest is verified while it streams, only
verified digests key an entry, a hit is used only for a blob that holds its digest, and the cache
folder must be the user's alone."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from probe.arch.image import scan_image
from tests.arch.image_build import write_docker_save, write_oci_layout
from tests.hostile.harness import run_probe
from tests.hostile.inputs import PREBUILT, layer

SITE = "usr/lib/python3/site-packages/pkg/"


def _genuine_and_forged(tmp: Path, compression: str | None) -> tuple[Path, Path, str]:
    """Two OCI layouts: the genuine image (3 device-code files), and a forged one whose only layer
    claims the genuine layer's digest (and size) but holds another file."""
    good = layer(
        tmp,
        "good",
        [
            (SITE + "multi.so", PREBUILT / "multi.so"),
            (SITE + "a.cubin", PREBUILT / "sm_90a.cubin"),
            (SITE + "b.cubin", PREBUILT / "sm_120.cubin"),
        ],
        compression,
    )
    evil = layer(tmp, "evil", [(SITE + "multi.so", PREBUILT / "none.so")], compression)
    genuine = write_oci_layout(tmp / "genuine", {"linux/amd64": [good]})
    forged = write_oci_layout(tmp / "forged", {"linux/amd64": [good]})
    blob = forged / "blobs" / "sha256" / good.digest.split(":")[1]
    data = evil.path.read_bytes()
    size = blob.stat().st_size
    assert len(data) <= size
    blob.write_bytes(data + bytes(size - len(data)))  # same size: the same cache key as the genuine
    return genuine, forged, good.digest


def _summary(res) -> tuple[int, int, list[str]]:  # type: ignore[no-untyped-def]
    files = [f for f in res.files if not f.error]
    return len(files), sum(len(f.entries) for f in files), [f.error for f in res.files if f.error]


@pytest.mark.parametrize("compression", ["gzip", None])
def test_forged_digest_cannot_poison_the_cache(tmp_path, monkeypatch, compression):
    """Scan the forged image first, then the genuine one, then the forged one again: the genuine
    scan is answered from its own bytes (before: from the forged layer's cache entry, 1 file
    instead of 3), and the forged image's mismatch is reported every time (a cache hit hides
    nothing)."""
    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path / "cache"))
    genuine, forged, digest = _genuine_and_forged(tmp_path, compression)
    fresh = _summary(scan_image(str(genuine), use_cache=False))
    assert fresh[0] == 3 and not fresh[2]
    first = _summary(scan_image(str(forged)))
    assert any(f"content does not match its digest {digest}" in e for e in first[2])
    assert _summary(scan_image(str(genuine))) == fresh
    again = _summary(scan_image(str(forged)))
    assert any("content does not match its digest" in e for e in again[2])
    warm = scan_image(str(genuine))
    assert _summary(warm) == fresh and all(f.cached for f in warm.files)  # the genuine one is cached


def test_docker_save_diff_id_is_verified(tmp_path, monkeypatch):
    """A docker-save tarball whose config names another layer's diff_id: the (plain) layer is
    hashed beside the parse, the mismatch reported, nothing cached under that digest."""
    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path / "cache"))
    good = layer(tmp_path, "good", [(SITE + "a.cubin", PREBUILT / "sm_90a.cubin")], None)
    evil = layer(tmp_path, "evil", [(SITE + "a.cubin", PREBUILT / "sm_75.cubin")], None)
    from dataclasses import replace

    forged = write_docker_save(tmp_path / "forged-save.tar", [replace(evil, diff_id=good.diff_id)])
    errors = _summary(scan_image(str(forged)))[2]
    assert any(f"content does not match its digest {good.diff_id}" in e for e in errors)
    ok = write_docker_save(tmp_path / "good-save.tar", [good])
    res = scan_image(str(ok))
    assert _summary(res)[2] == [] and res.files[0].entries[0].arch == "sm_90a"


def test_a_blob_changed_after_caching_is_hashed_again(tmp_path, monkeypatch):
    """The same file, rewritten in place (same size, mtime put back): its ctime changed, so the
    cache entry is not trusted for it; the new bytes are read and the mismatch reported."""
    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path / "cache"))
    genuine, forged, _digest = _genuine_and_forged(tmp_path, "gzip")
    assert _summary(scan_image(str(genuine)))[0] == 3
    blob_name = next(p.name for p in (forged / "blobs" / "sha256").iterdir() if p.stat().st_size > 2000)
    target = genuine / "blobs" / "sha256" / blob_name
    st = target.stat()
    time.sleep(0.01)
    target.write_bytes((forged / "blobs" / "sha256" / blob_name).read_bytes())
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    errors = _summary(scan_image(str(genuine)))[2]
    assert any("content does not match its digest" in e for e in errors)


def test_cache_folder_is_user_only(tmp_path, monkeypatch, caplog):
    """Made 0700; a group- or world-writable one is refused with the reason (the scan goes on
    uncached and answers the same)."""
    from probe.cachedir import secure_cache_dir

    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path / "fresh"))
    made = secure_cache_dir()
    assert made is not None and stat.S_IMODE(made.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("PROBE_CACHE_DIR", str(shared))
    assert secure_cache_dir() is None
    assert "writable by group or others" in caplog.text and "chmod 700" in caplog.text
    genuine, _forged, _d = _genuine_and_forged(tmp_path, "gzip")
    assert _summary(scan_image(str(genuine)))[0] == 3
    assert list(shared.iterdir()) == []  # nothing written into it


@pytest.mark.slow
def test_poisoning_sequence_as_whole_processes(tmp_path):
    """The sequence from the command line, in one cache folder: exit 5 with the mismatch for the
    forged image, exit 0 and all 3 files for the genuine one. Ceiling: 512 MB, 30 s each."""
    genuine, forged, digest = _genuine_and_forged(tmp_path, "gzip")
    env = dict(os.environ, PROBE_CACHE_DIR=str(tmp_path / "cache"))
    for img, rc in ((forged, 5), (genuine, 0), (forged, 5), (genuine, 0)):
        r = run_probe("scan", "--json", str(img), timeout=30, env=env)
        r.check(rc, seconds=30)
        rep = json.loads(r.out)
        if rc == 5:
            assert any(digest in (f["error"] or "") for f in rep["files"])
        else:
            assert rep["summary"]["files"] == 3 and rep["summary"]["errors"] == 0
