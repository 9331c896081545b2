"""``probe scan`` on the second round's hostile inputs, each as a whole process under the address cap
(:mod:`tests.hostile.harness`): the documented exit code, the reason in the record, no traceback, an
answer within the memory ceiling and well before the test's timeout (a hang fails, never blocks).

Before (the issue's runs): the lying bzip2 / LZMA members, the hidden central directory, the layer of a
million members, the piled-up pax headers, the held cubin and the million-entry fatbins went past
512 MB; the endless name tables, the long pax path, the repeated layer, the hundred bombs and the
index fan-out past a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.arch.image_build import LayerBlob, _sha256_file, write_oci_layout
from tests.hostile.harness import file_errors, run_probe, scan_json
from tests.hostile.inputs import EM_CUDA, PREBUILT, elf_head, gzip_bomb_layer, layer, oci_with_layer_blob
from tests.hostile.inputs2 import (
    cubin_with_endless_symbols,
    elf_with_endless_names,
    elf_with_overlapping_fatbins,
    fatbin_container,
    gzip_layer,
    header_only_entry,
    lying_wheel,
    many_members,
    pax_block,
    piled_pax,
    ptx_with_entries,
    tar_header,
    zip_with_hidden_members,
)


def _gz_blob(path: Path) -> LayerBlob:
    d = _sha256_file(path)
    return LayerBlob(path, d, d, path.stat().st_size, "application/vnd.oci.image.layer.v1.tar+gzip")


# ------------------------------------------------------------------ wheels


@pytest.mark.slow
@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA], ids=["bzip2", "lzma"])
def test_member_lying_about_its_size(tmp_path, method):
    """A bzip2 / LZMA cubin that declares 1 MiB and inflates to 2.5 GiB (before: zipfile inflated a
    compressed piece whole: past the 4 GiB cap). Read up to the size it declares, then refused."""
    whl = lying_wheel(tmp_path / "lie-1.0-py3-none-any.whl", "lie/k.cubin", method, 5 << 29, 1 << 20)
    r, rep = scan_json(str(whl), timeout=120)
    r.check(5, seconds=120)
    assert "inflates past the 1,048,576 bytes it declares" in file_errors(rep)["lie/k.cubin"]


@pytest.mark.slow
def test_central_directory_holding_more_than_the_end_record_says(tmp_path):
    """The end record says 2 members, the central directory holds 600,000 (before: zipfile parsed them
    all: 293 MB here, and more with more): counted entry by entry first, then refused."""
    whl = zip_with_hidden_members(tmp_path / "x-1.0-py3-none-any.whl", 600_000)
    r, rep = scan_json(str(whl), timeout=60)
    r.check(5, seconds=60)
    assert "a zip of 500,001 members (more than 500,000)" in rep["files"][0]["error"]


def test_bzip2_and_lzma_members_are_still_read(tmp_path):
    """Honest bzip2 / LZMA members are read as before (through the bounded streams)."""
    from probe.arch.wheel import scan_wheel

    for method in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        whl = tmp_path / f"ok{method}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w", method) as z:
            z.writestr("ok-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
            z.write(PREBUILT / "multi.so", "ok/multi.so")
            z.write(PREBUILT / "sm_90a.cubin", "ok/k.cubin")
        recs = {r.path.rsplit("!", 1)[1]: r for r in scan_wheel(str(whl))}
        assert all(r.error is None and r.entries for r in recs.values()), recs


# ------------------------------------------------------------------ layers


@pytest.mark.slow
def test_layer_of_a_million_members(tmp_path):
    """1.2 million tar members in one gzip layer (before: an index of every path — 239 MB and 18 s here,
    past 512 MB for the issue's millions)."""
    blob = gzip_layer(tmp_path / "many.tar.gz", many_members(1_200_000))
    img = oci_with_layer_blob(tmp_path / "oci", blob)
    r, rep = scan_json(str(img), timeout=120)
    r.check(5, seconds=120)
    assert any("more than 500,000 members in one layer" in e for e in file_errors(rep).values())


@pytest.mark.slow
def test_pax_headers_piling_up_before_one_member(tmp_path):
    """Thousands of pax headers of distinct keys (900 KB each) before one member: they were all kept."""
    blob = gzip_layer(tmp_path / "pax.tar.gz", piled_pax(3000, 900_000))
    img = oci_with_layer_blob(tmp_path / "oci", blob)
    r, rep = scan_json(str(img), timeout=60)
    r.check(5, seconds=60)
    assert any(
        "extension headers of more than 1 MiB before one member" in e for e in file_errors(rep).values()
    )


@pytest.mark.slow
def test_kernels_of_a_large_cubin_in_a_layer_held_once(tmp_path):
    """``--kernels`` of a 200 MiB cubin in a gzip layer: held once (before: three copies, ~600 MB)."""
    cubin = (PREBUILT / "sm_90a.cubin").read_bytes()
    blob = gzip_bomb_layer(tmp_path / "big.tar.gz", "usr/lib/big.cubin", 200 << 20, cubin)
    img = oci_with_layer_blob(tmp_path / "oci", blob)
    r, rep = scan_json("--kernels", str(img), timeout=120)
    r.check(0, seconds=120)
    (rec,) = [f for f in rep["files"] if f["path"].endswith("big.cubin")]
    assert rec["entries"][0]["arch"] == "sm_90a" and rec["kernels"]


@pytest.mark.slow
def test_long_pax_path_and_link_target(tmp_path):
    """A pax path and a link target of 300,000 components (before: quadratic checks, minutes)."""
    deep = "a/" * 300_000
    pieces = [
        pax_block({"path": deep + "x.so"}),
        tar_header("placeholder", 0),
        pax_block({"linkpath": deep + "y.so"}),
        tar_header("usr/lib/link.so", 0, "2"),
        tar_header("usr/lib/ok.cubin", len(PREBUILT.joinpath("sm_90a.cubin").read_bytes())),
        PREBUILT.joinpath("sm_90a.cubin").read_bytes(),
    ]
    data = pieces[-1]
    pieces[-1] = data + bytes(-len(data) % 512)
    blob = gzip_layer(tmp_path / "deep.tar.gz", pieces)
    img = oci_with_layer_blob(tmp_path / "oci", blob)
    r, rep = scan_json(str(img), timeout=60)
    r.check(5, seconds=60)
    errs = file_errors(rep)
    assert any("longer than 4096 bytes" in e for e in errs.values()), errs
    assert errs.get("/usr/lib/link.so", "").startswith("link target longer than 4096 bytes")
    assert any(f["path"].endswith("ok.cubin") and not f["error"] for f in rep["files"])


@pytest.mark.slow
def test_one_layer_listed_hundreds_of_times(tmp_path):
    """A manifest listing one 40 MB layer 500 times: read once (before: 500 times)."""
    lay = layer(
        tmp_path, "l", [("usr/lib/a.cubin", PREBUILT / "sm_90a.cubin"), ("pad", os.urandom(40 << 20))]
    )
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": [lay] * 500})
    r, rep = scan_json(str(img), timeout=60)
    r.check(0, seconds=60)
    assert [f["path"].split("!")[-1] for f in rep["files"]] == ["/usr/lib/a.cubin"]


@pytest.mark.slow
def test_a_hundred_layers_each_inflating_to_a_gigabyte(tmp_path):
    """100 gzip layers of ~1 MB, each inflating to 1 GB (under the per-layer floor): one bomb for the
    image as a whole (before: 100 GB inflated, minutes)."""
    data = gzip_bomb_layer(tmp_path / "b.tar.gz", "usr/share/zeros", 1_000_000_000, b"").read_bytes()
    blobs = []
    for i in range(100):  # the same stream, a distinct gzip MTIME (header bytes 4-7): a distinct layer
        p = tmp_path / f"b{i}.tar.gz"
        p.write_bytes(data[:4] + i.to_bytes(4, "little") + data[8:])
        blobs.append(_gz_blob(p))
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": blobs}, move=True)
    r, rep = scan_json(str(img), timeout=120)
    r.check(5, seconds=120)
    assert any("layers expand more than 100x together" in e for e in file_errors(rep).values())


@pytest.mark.slow
@pytest.mark.parametrize("distinct", [False, True], ids=["same-descriptor", "distinct-platforms"])
def test_index_fanning_out_to_one_large_manifest(tmp_path, distinct):
    """index.json lists one 15 MB manifest 4,000 times (before: parsed 4,000 times). The same
    descriptor: one image; distinct platforms: the 64 MiB metadata cap ends the walk."""
    import hashlib

    lay = layer(tmp_path, "l", [("usr/lib/a.cubin", PREBUILT / "sm_90a.cubin")])
    img = write_oci_layout(tmp_path / "oci", {"linux/amd64": [lay]})
    index = json.loads((img / "index.json").read_text())
    desc = index["manifests"][0]
    name = img / "blobs" / "sha256" / desc["digest"].split(":")[1]
    man = json.loads(name.read_text())
    man["annotations"] = {"pad": "x" * (15 << 20)}
    raw = json.dumps(man).encode()
    digest = hashlib.sha256(raw).hexdigest()
    (img / "blobs" / "sha256" / digest).write_bytes(raw)
    desc = {**desc, "digest": f"sha256:{digest}", "size": len(raw)}
    descs = [
        {**desc, "platform": {"os": "linux", "architecture": f"a{i}" if distinct else "amd64"}}
        for i in range(4000)
    ]
    (img / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": descs}))
    r, rep = scan_json("--platform", "linux/amd64", str(img), timeout=60)
    if distinct:
        r.check(5, seconds=60)
        assert "more than 64 MiB of image metadata" in rep["files"][0]["error"]
    else:
        r.check(0, seconds=60)


# ------------------------------------------------------------------ ELF, fatbin, PTX


@pytest.mark.slow
def test_elf_and_cubin_name_tables_without_their_nul(tmp_path):
    """200,000 section names and 100,000 kernel names pointing into tables with no NUL (before: each
    name read to the table's end: 27 s here, growing with the table times the names)."""
    (tmp_path / "n.so").write_bytes(elf_with_endless_names(200_000, 8 << 20))
    (tmp_path / "k.cubin").write_bytes(cubin_with_endless_symbols(100_000, 4 << 20))
    r, rep = scan_json("--kernels", str(tmp_path), timeout=60)
    r.check(0, seconds=60)
    assert {Path(f["path"]).name for f in rep["files"]} == {"n.so", "k.cubin"}


@pytest.mark.slow
def test_overlapping_sections_and_header_only_entries(tmp_path):
    """2,000 ``.nv_fatbin`` sections over one fatbin of 2,000 entries (4 million entries, before), and
    a fatbin of a million header-only entries: each read once, within the entry limit."""
    (tmp_path / "o.so").write_bytes(elf_with_overlapping_fatbins(2000, 2000))
    (tmp_path / "m.fatbin").write_bytes(fatbin_container(header_only_entry() for _ in range(1_000_000)))
    r, rep = scan_json(str(tmp_path), timeout=60)
    r.check(5, seconds=60)
    by = {Path(f["path"]).name: f for f in rep["files"]}
    assert len(by["o.so"]["entries"]) == 2000 and "overlap another" in by["o.so"]["error"]
    assert "more than 100,000 entries" in by["m.fatbin"]["error"]


@pytest.mark.slow
def test_kernels_of_ptx_with_millions_of_entries(tmp_path):
    (tmp_path / "k.ptx").write_bytes(ptx_with_entries(3_000_000))
    r, rep = scan_json("--kernels", str(tmp_path / "k.ptx"), timeout=60)
    r.check(0, seconds=60)
    assert "more than 65,536 kernel entry points" in rep["files"][0]["entries"][0]["kernels_error"]


# ------------------------------------------------------------------ what the user sees


def test_scan_ending_partial_says_why_on_stderr(tmp_path):
    (tmp_path / "bad.so").write_bytes(elf_head(EM_CUDA)[:40])
    shutil.copy(PREBUILT / "sm_90a.cubin", tmp_path / "ok.cubin")
    r = run_probe("scan", "--no-cache", str(tmp_path), timeout=60)
    r.check(5, seconds=60)
    line = [x for x in r.err.splitlines() if x.startswith("probe scan: ")]
    assert len(line) == 1 and "1 of 2 files could not be read" in line[0] and "bad.so" in line[0]


def test_member_names_reach_the_terminal_without_controls(tmp_path):
    """A wheel whose member names carry ESC, an 8-bit CSI and a bidi override: the scan table shows
    them escaped; the JSON stays the same document (``\\uXXXX`` is the same character there)."""
    name = "evil/\x1b]0;pwned\x07\x9b31m\u202ekcubin.cubin"
    whl = tmp_path / "evil-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("evil-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        z.write(PREBUILT / "sm_90a.cubin", name)
    for fmt in ("table", "md", "json"):
        r = run_probe("scan", "--no-cache", "--format", fmt, "--all-files", str(whl), timeout=60)
        r.check(0, seconds=60)
        assert not any(c in r.out + r.err for c in "\x1b\x07\x9b\u202e"), fmt
        if fmt == "json":
            assert json.loads(r.out)["files"][0]["path"].endswith(name)
        else:
            assert "\\u001b]0;pwned\\u0007\\u009b31m\\u202e" in r.out
