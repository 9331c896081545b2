"""Bad images give a record with an ``error`` and exit 5 — never a traceback, never a write or a
read outside the image: corrupt / truncated tarballs, a layer that is not a tar, symlink loops,
absolute and ``..`` member names, huge members; plus the CLI contract on an image."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from probe.arch.image import scan_image
from probe.arch.image.layers import safe_name
from probe.cli.main import main
from tests.arch.image_build import compress, tar_members, write_docker_save, write_oci_layout


@pytest.fixture
def cubin(cuda_fixtures) -> Path:  # type: ignore[no-untyped-def]
    return Path(cuda_fixtures.dir) / "sm_90a.cubin"


def _image(tmp: Path, layers: list[list[tuple]], compression: str | None = "gzip") -> Path:
    blobs = []
    for i, members in enumerate(layers):
        t = tmp / f"l{i}.tar"
        tar_members(t, members)
        blobs.append(compress(t, compression))
    return write_oci_layout(tmp / "oci", {"linux/amd64": blobs})


def _errors(res) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {f.path.split("!", 1)[-1]: f.error for f in res.files if f.error}


def _cli(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    rc = main(["scan", "--no-cache", "--target", "sm_90a", "--json", *argv])
    return rc, json.loads(capsys.readouterr().out)


def test_safe_name() -> None:
    assert safe_name("/usr/lib/x.so") == "usr/lib/x.so"
    assert safe_name("./a//b/../c.so") == "a/c.so"
    assert safe_name("../x.so") is None
    assert safe_name("a/../../x.so") is None


@pytest.mark.parametrize("content", [b"", b"garbage" * 100, b"\x1f\x8b" + b"\0" * 50])
def test_not_an_image(tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "img.tar"
    p.write_bytes(content)
    rc, out = _cli(str(p), capsys=capsys)
    assert rc == 5 and out["files"][0]["path"] == str(p) and out["files"][0]["error"]


def test_truncated_tarball(tmp_path: Path, cubin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = tmp_path / "l.tar"
    tar_members(t, [("a.cubin", cubin), ("b.so", b"\0" * 100_000)])
    img = write_docker_save(tmp_path / "img.tar", [compress(t, None)])
    data = img.read_bytes()
    manifest = data.rindex(b'[{"Config"')  # manifest.json is the last member
    # cut inside the layer (in a.cubin, in b.so) and inside manifest.json
    for cut in (len(data) // 3, len(data) * 4 // 5, manifest + 20):
        short = tmp_path / f"cut{cut}.tar"
        short.write_bytes(data[:cut])
        rc, out = _cli(str(short), capsys=capsys)
        assert rc == 5 and any(f["error"] for f in out["files"]), cut


@pytest.mark.parametrize("compression", ["gzip", "zstd", None])
def test_truncated_and_corrupt_layer(tmp_path: Path, cubin: Path, compression: str | None) -> None:
    img = _image(tmp_path, [[("a.cubin", cubin), ("big.so", os.urandom(3 << 20))]], compression)
    blob = max((img / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)
    data = blob.read_bytes()
    blob.write_bytes(data[: len(data) // 2])
    errs = _errors(scan_image(str(img), use_cache=False))
    assert any("truncated" in e or "corrupt" in e for e in errs.values()), errs
    blob.write_bytes(data[:100] + bytes(b ^ 0x5A for b in data[100:400]) + data[400:])
    assert _errors(scan_image(str(img), use_cache=False))


def test_layer_not_a_tar(tmp_path: Path, cubin: Path) -> None:
    img = _image(tmp_path, [[("a.cubin", cubin)]], None)
    blob = max((img / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)
    blob.write_bytes(b"PK\x03\x04 this is a zip, not a tar" * 40)
    errs = _errors(scan_image(str(img), use_cache=False))
    assert list(errs.values()) == ["layer 0 of 1: not a tar archive"]


def test_missing_blob(tmp_path: Path, cubin: Path) -> None:
    img = _image(tmp_path, [[("a.cubin", cubin)]])
    blob = max((img / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)
    blob.unlink()
    (err,) = _errors(scan_image(str(img), use_cache=False)).values()
    assert "missing" in err


def test_links_never_leave_the_image(tmp_path: Path, cubin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside.so"
    outside.write_bytes(cubin.read_bytes())
    img = _image(
        tmp_path,
        [
            [
                ("lib/a.so", "->", "b.so"),
                ("lib/b.so", "->", "a.so"),  # loop
                ("lib/up.so", "->", "../../../../../../" + str(outside)),  # climbs: stops at the image root
                ("lib/abs.so", "->", str(outside)),  # absolute: from the image root
                ("lib/self.so", "->", "self.so"),
                ("/abs/name.cubin", cubin),  # absolute member name: read as abs/name.cubin
                ("../../escape.cubin", cubin),  # never used as a path
                ("ok/../../../escape2.cubin", cubin),
                ("lib/hard.cubin", "=>", "abs/name.cubin"),
            ]
        ],
    )
    rc, out = _cli(str(img), capsys=capsys)
    errs = {f["path"].split("!", 1)[1]: f["error"] for f in out["files"] if f["error"]}
    assert rc == 5
    assert errs["/lib/a.so"] == errs["/lib/b.so"] == errs["/lib/self.so"] == "symlink loop"
    assert errs["/lib/up.so"] == errs["/lib/abs.so"] == "file vanished or does not exist"
    assert "leaves the image root" in errs["../../escape.cubin"] and "ok/../../../escape2.cubin" in errs
    ok = [f["path"].split("!", 1)[1] for f in out["files"] if not f["error"]]
    assert ok == ["/abs/name.cubin"]  # the hard link is the same file: reported once
    assert not (tmp_path.parent / "escape.cubin").exists()


def test_huge_member_header(tmp_path: Path) -> None:
    """A member whose header claims 8 GiB in a small layer: the layer is truncated, said so."""
    ti = tarfile.TarInfo("huge.so")
    ti.size = 8 << 30
    hdr = bytearray(ti.tobuf(format=tarfile.GNU_FORMAT))
    t = tmp_path / "l.tar"
    t.write_bytes(bytes(hdr) + b"\x7fELF" + b"\0" * 4000)
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": [compress(t, "gzip")]})
    errs = _errors(scan_image(str(img), use_cache=False))
    assert any("truncated" in e for e in errs.values()), errs


@pytest.mark.slow
def test_zip_bomb_layer_is_bounded(tmp_path: Path) -> None:
    """512 MiB of zeros in one member (gzip: ~500 KiB): inflated in bounded pieces, skipped."""
    import resource

    t = tmp_path / "l.tar"
    with tarfile.open(t, "w") as tf:
        ti = tarfile.TarInfo("zeros.bin")
        ti.size = 512 << 20

        class Zeros:
            def read(self, n: int) -> bytes:
                return b"\0" * n

        tf.addfile(ti, Zeros())  # type: ignore[arg-type]
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": [compress(t, "gzip")]})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = scan_image(str(img), use_cache=False)
    assert res.files == []
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB


def test_cli_contract_and_gate(tmp_path: Path, cubin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = "usr/local/lib/python3.12/dist-packages"
    img = _image(
        tmp_path,
        [
            [
                (f"{site}/vllm/_moe_C.abi3.so", cubin),
                (f"{site}/vllm-0.33.0.dist-info/RECORD", b"vllm/_moe_C.abi3.so,,\n"),
            ]
        ],
    )
    rc, out = _cli(str(img), capsys=capsys)
    assert rc == 0
    from probe.arch.records import validate_report

    validate_report(out)
    (f,) = out["files"]
    assert f["path"] == f"{img}!/{site}/vllm/_moe_C.abi3.so" and f["package"] == "vllm"
    (verdict,) = out["verdicts"][0]["targets"].values()
    assert verdict["verdict"] == "sass"
    scan_json = tmp_path / "scan.json"
    scan_json.write_text(json.dumps(out))
    # probe gate reads a scan report as a static section: --require-arch works on image paths
    gate = ["gate", "--baseline", str(scan_json), "--current", str(scan_json)]
    assert main([*gate, "--require-arch", "sm_90a:*_moe_C*"]) == 0
    assert main([*gate, "--require-arch", "sm_120:*_moe_C*"]) == 1
    capsys.readouterr()
    rc = main(["scan", "--no-cache", "--platform", "linux/amd64", "--target", "sm_100", str(img)])
    assert rc == 0 and "_moe_C" in capsys.readouterr().out
    assert main(["scan", "--no-cache", "--platform", "linux/arm64", str(img)]) == 2
    assert "--platform linux/arm64: the image holds linux/amd64" in capsys.readouterr().err
