"""``probe scan IMAGE``: OCI layouts and docker-save tarballs built here (tests/arch/image_build.py)
from the CUDA fixtures, scanned straight from the layers and compared with a scan of the same
image unpacked by an independent reference unpacker."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from probe.arch.image import is_image, scan_image
from probe.arch.records import Environment, FileRecord
from probe.arch.scanner import scan_paths
from probe.errors import UsageError
from tests.arch import synth
from tests.arch.image_build import (
    apply_layers,
    compress,
    tar_folder,
    tar_members,
    write_docker_save,
    write_oci_layout,
)

SITE = "usr/lib/python3.12/site-packages"
LD_SCRIPT = (
    b"/* GNU ld script\n   Use the shared library, but some functions are only in\n"
    b"   the static library, so try that secondarily.  */\nOUTPUT_FORMAT(elf64-x86-64)\n"
    b"GROUP ( /lib/x86_64-linux-gnu/libc.so.6 /usr/lib/x86_64-linux-gnu/libc_nonshared.a )\n"
)


def big_host_elf() -> bytes:
    """A 20 MiB host ELF with an .nv_fatbin: large enough to be streamed, not held in memory."""
    fat = synth.container(synth.entry(2, 90, b"\1" * 64), synth.entry(1, 80, b".version 8.0\0" + b"\0" * 32))
    return synth.elf64(
        machine=62, e_type=3, sections=[(".text", 1, b"\0" * (20 << 20)), (".nv_fatbin", 1, fat)]
    )


def layer_members(fx: Path) -> list[list[tuple]]:
    """Three layers: a base, a Python environment with a dist-info, and an update that deletes,
    replaces, links and hides things."""
    base = [
        ("usr/", "/"),
        ("usr/lib/x86_64-linux-gnu/libnone.so.1", fx / "none.so"),
        ("usr/lib/x86_64-linux-gnu/libnone.so", "->", "libnone.so.1"),
        ("usr/lib/x86_64-linux-gnu/libc.so", LD_SCRIPT),  # libc6-dev's: text, not ELF
        ("usr/local/cuda/lib64/sm_75.cubin", fx / "sm_75.cubin"),
        ("opt/gone/old.so", fx / "multi.so"),
        ("opt/keep/rdc.so", fx / "rdc.so"),
        ("lib", "->", "usr/lib"),
    ]
    record = "\n".join(f"pkgx/{n},," for n in ("_C.abi3.so", "k.cubin", "big.so")) + "\npkgx/__init__.py,,\n"
    env = [
        (f"{SITE}/pkgx/_C.abi3.so", fx / "multi.so"),
        (f"{SITE}/pkgx/k.cubin", fx / "sm_90a.cubin"),
        (f"{SITE}/pkgx/big.so", big_host_elf()),
        (f"{SITE}/pkgx/linker.so", b"/* GNU ld script */ INPUT(libfoo.so)\n"),
        (f"{SITE}/pkgx/cut.so", (fx / "multi.so").read_bytes()[:3000]),  # a truncated real ELF
        (f"{SITE}/plain/k.so", fx / "multi.so"),  # no RECORD line: package and version by name
        (f"{SITE}/plain-4.5.dist-info/METADATA", b"Name: plain\n"),
        (f"{SITE}/pkgx/kernels.ptx", fx / "k110a.ptx"),
        (f"{SITE}/pkgx/default.fatbin", fx / "default.fatbin"),
        (f"{SITE}/pkgx_dist-1.2.3.dist-info/RECORD", record.encode()),
        (f"{SITE}/pkgx_dist-1.2.3.dist-info/METADATA", b"Name: pkgx-dist\n"),
        (f"{SITE}/other/ptxonly.so", fx / "ptxonly.so"),
        ("opt/keep/old2.so", fx / "none.so"),
    ]
    update = [
        ("opt/.wh.gone", b""),  # the whole folder deleted
        (f"{SITE}/other/.wh..wh..opq", b""),  # opaque: other/ptxonly.so hidden
        (f"{SITE}/other/new.so", fx / "none.so"),
        ("opt/keep/.wh.old2.so", b""),
        (f"{SITE}/pkgx/k.cubin", fx / "sm_120.cubin"),  # replaced
        ("usr/local/cuda/lib64/sm_100f.cubin", fx / "sm_100f.cubin"),
        ("usr/local/cuda/lib64/alias.cubin", "->", "../lib64/sm_100f.cubin"),
    ]
    return [base, env, update]


def build_layers(tmp: Path, fx: Path, compression: str | None) -> tuple[list, list[Path]]:
    blobs, plain = [], []
    for i, members in enumerate(layer_members(fx)):
        t = tmp / f"layer{i}.tar"
        tar_members(t, members)
        keep = tmp / f"plain{i}.tar"
        shutil.copyfile(t, keep)
        plain.append(keep)
        blobs.append(compress(t, compression))
    return blobs, plain


def arches(files: list[FileRecord], strip: str) -> dict[str, tuple]:
    out = {}
    for f in files:
        rel = f.path.split("!/", 1)[1] if "!/" in f.path else os.path.relpath(os.path.realpath(f.path), strip)
        out[rel] = (
            f.kind,
            f.package,
            f.package_version,
            f.error,
            f.containers,
            sorted((e.section, e.kind, e.arch) for e in f.entries),
        )
    return out


@pytest.fixture
def fx(cuda_fixtures) -> Path:  # type: ignore[no-untyped-def]
    return Path(cuda_fixtures.dir)


@pytest.mark.parametrize("fmt", ["oci-dir", "oci-tar", "docker-save"])
@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_same_as_unpacked(tmp_path: Path, fx: Path, fmt: str, compression: str | None) -> None:
    if fmt == "docker-save" and compression == "zstd":
        pytest.skip("docker save writes uncompressed or gzip layers")
    blobs, plain = build_layers(tmp_path, fx, compression)
    layout = write_oci_layout(tmp_path / "oci", {"linux/amd64": blobs})
    image = {
        "oci-dir": layout,
        "oci-tar": tar_folder(layout, tmp_path / "oci.tar"),
        "docker-save": write_docker_save(tmp_path / "img.tar", blobs),
    }[fmt]
    assert is_image(str(image))
    res = scan_image(str(image), use_cache=False)
    root = tmp_path / "rootfs"
    apply_layers(plain, root)
    want = arches(scan_paths([root], use_cache=False), str(root.resolve()))
    got = arches(res.files, "")
    assert got == want
    # the facts the layers were built to show
    assert (
        f"{SITE}/other/ptxonly.so" not in got
        and "opt/gone/old.so" not in got
        and "opt/keep/old2.so" not in got
    )
    assert got["usr/local/cuda/lib64/sm_100f.cubin"][5] == [("cubin", "sass", "sm_100f")]
    assert got[f"{SITE}/pkgx/k.cubin"][5] == [("cubin", "sass", "sm_120")]
    assert got[f"{SITE}/pkgx/_C.abi3.so"][1:3] == ("pkgx-dist", "1.2.3")
    assert got[f"{SITE}/plain/k.so"][1:3] == ("plain", "4.5")
    assert got[f"{SITE}/other/new.so"][1:3] == ("other", None)  # no other-*.dist-info
    assert got["usr/local/cuda/lib64/sm_75.cubin"][1:3] == (None, None)
    assert got[f"{SITE}/pkgx/big.so"][5] == [
        (".nv_fatbin", "ptx", "compute_80"),
        (".nv_fatbin", "sass", "sm_90"),
    ]
    # text named like a library (GNU ld scripts): not device code, no error; a cut ELF: an error
    for ld in (f"{SITE}/pkgx/linker.so", "usr/lib/x86_64-linux-gnu/libc.so"):
        assert got[ld][0] == "other" and got[ld][3] is None, ld
    assert "truncated" in (got[f"{SITE}/pkgx/cut.so"][3] or "")
    assert res.environments == [
        Environment(site=f"{os.path.abspath(image)}!/{SITE}", packages={"pkgx-dist": "1.2.3", "plain": "4.5"})
    ]
    assert all(f.path.startswith(f"{os.path.abspath(image)}!/") for f in res.files)


def test_kernels_same_as_unpacked(tmp_path: Path, fx: Path) -> None:
    blobs, plain = build_layers(tmp_path, fx, "gzip")
    layout = write_oci_layout(tmp_path / "oci", {"linux/amd64": blobs})
    res = scan_image(str(layout), kernels=True, use_cache=False)
    root = tmp_path / "rootfs"
    apply_layers(plain, root)
    found = scan_paths([root], use_cache=False, kernels=True)
    disk = {os.path.relpath(os.path.realpath(f.path), root.resolve()): f for f in found}
    for f in res.files:
        rel = f.path.split("!/", 1)[1]
        assert f.kernels == disk[rel].kernels, rel
    assert any(f.kernels for f in res.files)


def test_platform_choice(tmp_path: Path, fx: Path) -> None:
    blobs, _ = build_layers(tmp_path, fx, "gzip")
    arm = compress(_one_layer(tmp_path, [("arm/only.cubin", fx / "sm_90a.cubin")]), "gzip")
    layout = write_oci_layout(tmp_path / "oci", {"linux/amd64": blobs, "linux/arm64": [arm]}, nested=True)
    with pytest.raises(UsageError, match=r"linux/amd64.*linux/arm64"):
        scan_image(str(layout), use_cache=False)
    res = scan_image(str(layout), platform="linux/arm64", use_cache=False)
    assert [f.path.split("!/")[1] for f in res.files] == ["arm/only.cubin"]
    assert res.platform == "linux/arm64"
    with pytest.raises(UsageError, match="linux/s390x"):
        scan_image(str(layout), platform="linux/s390x", use_cache=False)


def _one_layer(tmp: Path, members: list[tuple], name: str = "extra.tar") -> Path:
    t = tmp / name
    tar_members(t, members)
    return t


def test_cache_rereads_only_the_changed_layer(
    tmp_path: Path, fx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from probe.arch.image import reader

    blobs, _ = build_layers(tmp_path, fx, "zstd")
    reads: list[str] = []
    real = reader.read_layer

    def counting(fd, blob, *a, **kw):  # type: ignore[no-untyped-def]
        reads.append(blob.digest)
        return real(fd, blob, *a, **kw)

    monkeypatch.setattr(reader, "read_layer", counting)
    first = scan_image(str(write_oci_layout(tmp_path / "a", {"linux/amd64": blobs})))
    assert len(reads) == 3 and not any(f.cached for f in first.files)
    reads.clear()
    again = scan_image(str(write_oci_layout(tmp_path / "a", {"linux/amd64": blobs})))
    assert reads == [] and arches(again.files, "") == arches(first.files, "")
    # a rebuild that changed the top layer (it deletes a file below, adds one)
    top_tar = _one_layer(
        tmp_path, [(f"{SITE}/pkgx/.wh._C.abi3.so", b""), ("new/x.cubin", fx / "sm_75.cubin")]
    )
    top = compress(top_tar, "gzip")
    rebuilt = scan_image(str(write_oci_layout(tmp_path / "b", {"linux/amd64": [*blobs[:2], top]})))
    # layers 1 and 0 are read again too: other/ptxonly.so and opt/gone/old.so, hidden by the old
    # top layer, were never read; once read, they are cached as well
    assert reads == [top.digest, blobs[1].digest, blobs[0].digest]
    paths = {f.path.split("!/")[1] for f in rebuilt.files}
    assert "new/x.cubin" in paths and f"{SITE}/pkgx/_C.abi3.so" not in paths
    assert f"{SITE}/other/ptxonly.so" in paths and "opt/gone/old.so" in paths
    reads.clear()
    scan_image(str(write_oci_layout(tmp_path / "a", {"linux/amd64": blobs})))
    assert reads == []
    scan_image(str(write_oci_layout(tmp_path / "b", {"linux/amd64": [*blobs[:2], top]})))
    assert reads == []


def test_only_the_changed_top_layer_is_read(
    tmp_path: Path, fx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from probe.arch.image import reader

    blobs, _ = build_layers(tmp_path, fx, "gzip")
    scan_image(str(write_oci_layout(tmp_path / "a", {"linux/amd64": blobs})))
    reads: list[str] = []
    real = reader.read_layer
    monkeypatch.setattr(
        reader,
        "read_layer",
        lambda fd, blob, *a, **kw: (reads.append(blob.digest), real(fd, blob, *a, **kw))[1],
    )
    top = compress(_one_layer(tmp_path, [*layer_members(fx)[2], ("new/y.cubin", fx / "sm_75.cubin")]), "zstd")
    res = scan_image(str(write_oci_layout(tmp_path / "b", {"linux/amd64": [*blobs[:2], top]})))
    assert reads == [top.digest]
    assert sum(not f.cached for f in res.files) == 4  # the device-code files of the new top layer


def test_docker_save_duplicate_layer_link(tmp_path: Path, fx: Path) -> None:
    """docker save stores an identical layer once and links the other copy to it."""
    a = _one_layer(tmp_path, [("x/a.cubin", fx / "sm_75.cubin")], "a.tar")
    b = _one_layer(tmp_path, [("x/.wh.a.cubin", b"")], "b.tar")
    blobs = [compress(a, None), compress(b, None)]
    img = write_docker_save(tmp_path / "img.tar", [*blobs, blobs[0]], duplicate_link=True)
    res = scan_image(str(img), use_cache=False)
    assert [f.path.split("!/")[1] for f in res.files] == ["x/a.cubin"]  # deleted, then added again
