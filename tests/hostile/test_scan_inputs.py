"""``probe scan`` on hostile inputs, each as a whole process: the documented exit code, a message,
no traceback, an answer within the stated time and memory ceiling (:data:`harness.MAX_RSS_MB`).

Decompression bombs are generated at test time (a few MB on disk, gigabytes inflated), small
inputs too (nothing here is worth committing: every one is a few lines of generator).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.arch.image_build import write_oci_layout
from tests.hostile.harness import file_errors, scan_json
from tests.hostile.inputs import (
    EM_CUDA,
    EM_X86_64,
    PREBUILT,
    deep_json,
    elf_head,
    fanout_index_layout,
    gzip_bomb_layer,
    layer,
    oci_with_layer_blob,
    wheel_with_member,
)


@pytest.mark.slow
@pytest.mark.parametrize("size_gib", [1.9, 6])
def test_gzip_bomb_layer_holding_a_huge_cubin(tmp_path, size_gib):
    """A gzip layer inflating to a multi-GB .cubin (1.9 GiB: under the old 2 GiB in-memory limit,
    5.9 GB RSS before; 6 GiB) — the member is not held (256 MiB per member), and the layer stops
    at the expansion limit (100x past 1 GiB). Ceiling: 512 MB, 60 s."""
    blob = gzip_bomb_layer(
        tmp_path / "bomb.tar.gz", "usr/lib/big.cubin", int(size_gib * (1 << 30)), elf_head(EM_CUDA)
    )
    img = oci_with_layer_blob(tmp_path / "oci", blob)
    r, rep = scan_json(str(img), timeout=60)
    r.check(5, seconds=60)
    errs = file_errors(rep)
    assert "more than the 256 MiB held in memory" in errs["/usr/lib/big.cubin"]
    assert any("decompression bomb" in e for e in errs.values())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("member", "size", "machine"),
    [("bomb/big.cubin", (1 << 30) - 1, EM_CUDA), ("bomb/_C.so", (2 << 30) - 1, EM_X86_64)],
)
def test_wheel_zip_bomb_member(tmp_path, member, size, machine):
    """A wheel whose device-code member deflates ~1000:1 (before: 2.1 GB RSS, 26 s): refused from
    the sizes its zip directory declares, nothing inflated. Ceiling: 512 MB, 30 s."""
    whl = wheel_with_member(
        tmp_path / "bomb-1.0-cp312-cp312-linux_x86_64.whl", member, size, elf_head(machine)
    )
    r, rep = scan_json(str(whl), timeout=30)
    r.check(5, seconds=30)
    assert "decompression bomb" in next(iter(file_errors(rep).values()))


@pytest.mark.slow
def test_one_bomb_member_among_good_ones(tmp_path):
    """A single bomb member (with good members around it, so the wheel as a whole is not over the
    limit) gets its own error; the good members are read."""
    import zipfile

    whl = wheel_with_member(
        tmp_path / "mix-1.0-cp312-cp312-linux_x86_64.whl", "mix/big.cubin", 64 << 20, elf_head(EM_CUDA)
    )
    with zipfile.ZipFile(whl, "a") as z:
        z.write(PREBUILT / "multi.so", "mix/multi.so")
        z.writestr(zipfile.ZipInfo("mix/noise.bin"), os.urandom(4 << 20))  # not device code: ratio 1
    r, rep = scan_json(str(whl), timeout=30)
    r.check(5, seconds=30)
    by = {f["path"].split("!")[-1]: f for f in rep["files"]}
    assert "decompression bomb" in by["mix/big.cubin"]["error"]
    assert by["mix/multi.so"]["error"] is None and by["mix/multi.so"]["entries"]


@pytest.mark.slow
def test_fifo_as_a_file_an_image_and_an_oci_blob(tmp_path):
    """FIFOs are never opened for reading (that would wait forever for a writer): named as a file,
    named like an image tarball, met in a walk, or standing for an OCI blob. Each: a record with
    an error, exit 5, in seconds. Ceiling: 512 MB, 30 s."""
    os.mkfifo(tmp_path / "x.so")
    os.mkfifo(tmp_path / "image.tar")
    lay = layer(tmp_path, "l", [("usr/lib/a.cubin", PREBUILT / "sm_90a.cubin")])
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": [lay]})
    blob = img / "blobs" / "sha256" / lay.digest.split(":")[1]
    blob.unlink()
    os.mkfifo(blob)
    walked = tmp_path / "tree"
    walked.mkdir()
    os.mkfifo(walked / "y.cubin")
    for target, needle in (
        (tmp_path / "x.so", "a FIFO, not a regular file"),
        (tmp_path / "image.tar", "a FIFO, not a regular file"),
        (img, "is a FIFO, not a regular file: not read"),
        (walked, "a FIFO, not a regular file"),
    ):
        r, rep = scan_json(str(target), timeout=30)
        r.check(5, seconds=30)
        assert any(needle in e for e in file_errors(rep).values()), (target, file_errors(rep))


@pytest.mark.slow
def test_devices_are_not_read(tmp_path):
    """/dev/zero named as an input (endless bytes) and as a link in a walked folder."""
    (tmp_path / "zero.so").symlink_to("/dev/zero")
    r, rep = scan_json("/dev/zero", timeout=30)
    r.check(5, seconds=30)
    assert "a character device, not a regular file" in rep["files"][0]["error"]


@pytest.mark.slow
def test_scan_proc_stays_inside_proc():
    """``probe scan /proc``: /proc/*/cwd and /proc/*/root lead to / and are not followed (before:
    90 s, 2.6 GB, 48,563 files from all of /). Ceiling: 512 MB, 60 s."""
    r, rep = scan_json("/proc", timeout=60)
    r.check((0, 5), seconds=60)
    assert all(f["path"].startswith("/proc/") for f in rep["files"])
    assert rep["summary"]["files"] < 1000
    assert "lead outside the folders scanned and were not followed" in r.err


def test_links_out_of_the_root_are_not_followed(tmp_path):
    """A symlinked file or folder inside the root that leads outside it: the file gets a record
    saying so, the folder is not walked; links inside the root are followed as before."""
    from probe.arch.scanner import scan_paths

    outside, root = tmp_path / "outside", tmp_path / "root"
    (outside / "lib").mkdir(parents=True)
    shutil.copy(PREBUILT / "sm_90a.cubin", outside / "lib" / "k.cubin")
    (root / "inner").mkdir(parents=True)
    shutil.copy(PREBUILT / "sm_120.cubin", root / "inner" / "in.cubin")
    (root / "out.cubin").symlink_to(outside / "lib" / "k.cubin")
    (root / "outdir").symlink_to(outside / "lib")
    (root / "indir").symlink_to(root / "inner")
    recs = {Path(f.path).relative_to(root).as_posix(): f for f in scan_paths([root], use_cache=False)}
    assert "outside the folders scanned: not followed" in recs["out.cubin"].error
    assert not any(k.startswith("outdir/") for k in recs)
    inner = [f for k, f in recs.items() if k.endswith("/in.cubin")]  # indir/ is inner/: once
    assert len(inner) == 1 and inner[0].error is None
    both = scan_paths([root, outside], use_cache=False)  # the target named too: followed, each file once
    assert not any(f.error for f in both) and len(both) == 2


def test_pseudo_file_systems_from_mountinfo(tmp_path):
    from probe.arch.walk import pseudo_devices

    info = tmp_path / "mountinfo"
    info.write_text(
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "23 27 0:22 / /sys rw - sysfs sysfs rw\n"
        "30 27 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "garbage line\n"
    )
    assert pseudo_devices(str(info)) == {os.makedev(0, 21), os.makedev(0, 22)}
    assert pseudo_devices(str(tmp_path / "missing")) == frozenset()


@pytest.mark.slow
def test_nested_index_fan_out_answers_at_once(tmp_path):
    """index.json lists one index 60 times, which lists the next 60 times, 8 levels down (60^8
    walks as a tree; before: a hang): each index is read once. Ceiling: 512 MB, 20 s."""
    img = fanout_index_layout(tmp_path / "fan", fanout=60, depth=8)
    r, _rep = scan_json(str(img), timeout=20)
    r.check(0, seconds=20)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["index.json", "manifest.json", "manifest blob"])
def test_metadata_nested_thousands_deep(tmp_path, where):
    """index.json / manifest.json / a manifest nested 5,000 levels deep: a record with the limit
    (before: internal error RecursionError, exit 4). Ceiling: 512 MB, 20 s."""
    lay = layer(tmp_path, "l", [("usr/lib/a.cubin", PREBUILT / "sm_90a.cubin")])
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": [lay]})
    deep = deep_json(5000)
    if where == "index.json":
        (img / "index.json").write_text('{"schemaVersion": 2, "manifests": ' + deep + "}")
    elif where == "manifest.json":  # a docker-save tarball
        import io
        import tarfile

        img = tmp_path / "saved.tar"
        with tarfile.open(img, "w") as tf:
            ti = tarfile.TarInfo("manifest.json")
            ti.size = len(deep)
            tf.addfile(ti, io.BytesIO(deep.encode()))
    else:
        index = json.loads((img / "index.json").read_text())
        name = index["manifests"][0]["digest"].split(":")[1]
        (img / "blobs" / "sha256" / name).write_text('{"layers": ' + deep + "}")
    r, rep = scan_json(str(img), timeout=20)
    r.check(5, seconds=20)
    assert "nested more than 200 levels deep" in rep["files"][0]["error"]


@pytest.mark.parametrize("depth", ["root", "deep"])
def test_opaque_whiteout_at_any_depth(tmp_path, depth):
    """``.wh..wh..opq`` hides everything the lower layers hold under its folder — the image root
    included (before: the lower layer's files stayed visible there)."""
    from probe.arch.image import scan_image

    base = "" if depth == "root" else "usr/lib/python3/site-packages/pkg/"
    lower = layer(
        tmp_path,
        "lo",
        [(base + "old.cubin", PREBUILT / "sm_90a.cubin"), ("opt/x.cubin", PREBUILT / "sm_75.cubin")],
    )
    upper = layer(
        tmp_path, "up", [(base + ".wh..wh..opq", b""), (base + "new.cubin", PREBUILT / "sm_120.cubin")]
    )
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": [lower, upper]})
    seen = {f.path.split("!/")[1] for f in scan_image(str(img), use_cache=False).files}
    assert base + "new.cubin" in seen and base + "old.cubin" not in seen
    assert ("opt/x.cubin" in seen) == (depth == "deep")


def test_too_many_descriptors_and_layers(tmp_path, monkeypatch):
    from probe.arch.image import layout, scan_image

    lay = layer(tmp_path, "l", [("a.cubin", PREBUILT / "sm_90a.cubin")])
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": [lay] * 3})
    monkeypatch.setattr(layout, "MAX_LAYERS", 2)
    assert "at most 2 layers" in scan_image(str(img), use_cache=False).files[0].error
    monkeypatch.setattr(layout, "MAX_DESCRIPTORS", 0)
    assert "more than 0 descriptors" in scan_image(str(img), use_cache=False).files[0].error


def test_kernels_per_member_limit_is_said(tmp_path, monkeypatch):
    """``--kernels`` holds a member of a compressed layer in memory up to the per-member limit; a
    larger one is described from its headers and its record says the kernels were not read."""
    from probe.arch.image import reader, scan_image

    monkeypatch.setattr(reader, "MAX_HELD", 64 << 10)
    monkeypatch.setattr(reader, "SMALL_MEMBER", 16 << 10)
    lay = layer(
        tmp_path,
        "l",
        [("usr/lib/multi.so", PREBUILT / "multi.so"), ("usr/lib/big.cubin", PREBUILT / "multi.so")],
    )
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": [lay]})
    by = {f.path.split("!/")[1]: f for f in scan_image(str(img), kernels=True, use_cache=False).files}
    so = by["usr/lib/multi.so"]
    assert so.entries and "kernels not read" in so.error and "held in memory per member" not in so.error
    assert "--kernels holds in memory per member" in so.error


def test_overlapping_zip_members(tmp_path):
    """Two device-code members whose compressed bytes overlap (the "better zip bomb" trick: the
    same kernel inflated over and over): the wheel is not read."""
    import struct
    import zipfile

    from probe.arch.wheel import scan_wheel

    whl = tmp_path / "ov-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("ov-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        z.write(PREBUILT / "multi.so", "ov/a.so")
    data = bytearray(whl.read_bytes())
    # a second central directory entry pointing at the first member's local header
    cd = data.rfind(b"PK\x01\x02")
    entry = bytes(data[cd : data.find(b"PK\x05\x06")])
    entry = entry.replace(b"ov/a.so", b"ov/b.so")
    eocd = data.find(b"PK\x05\x06")
    n, size, off = (
        struct.unpack_from("<HIIH", data, eocd + 10)[0],
        *struct.unpack_from("<II", data, eocd + 12),
    )
    data[eocd:eocd] = entry
    eocd += len(entry)
    struct.pack_into("<HHII", data, eocd + 8, n + 1, n + 1, size + len(entry), off)
    whl.write_bytes(bytes(data))
    recs = scan_wheel(str(whl))
    assert len(recs) == 1 and "overlapping members" in recs[0].error


def test_zip_declaring_too_many_members(tmp_path, monkeypatch):
    from probe.arch import wheel

    monkeypatch.setattr(wheel, "MAX_ARCHIVE_MEMBERS", 1)
    import zipfile

    whl = tmp_path / "many-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("many-1.0.dist-info/WHEEL", "x")
        z.writestr("many/a.so", "x")
    recs = wheel.scan_wheel(str(whl))
    assert "a zip of 2 members (more than 1)" in recs[0].error
