"""Every nvcc-built fixture: probe's scan against what the -gencode options asked for, and
against cuobjdump (listings and per-kernel symbol tables)."""

from __future__ import annotations

import re
import subprocess
from collections import Counter

import pytest

from probe.arch.cuobjdump import verify_files
from probe.arch.scanner import scan_file
from probe.arch.verdicts import file_codes, kernel_codes


def _expected_isa(release: str | None) -> str | None:
    """nvcc 13.X writes PTX ISA 9.X (12.X: 8.X with X >= 7 ...); None when unknown."""
    if not release:
        return None
    major, minor = (int(x) for x in release.split("."))
    return f"9.{minor}" if major == 13 else None


@pytest.fixture(scope="module")
def scanned(cuda_fixtures):
    return {n: scan_file(str(cuda_fixtures.path(n)), kernels=True) for n in cuda_fixtures.names}


def test_all_fixtures_present(cuda_fixtures):
    assert len(cuda_fixtures.names) >= 14
    for n in cuda_fixtures.names:
        assert cuda_fixtures.path(n).stat().st_size > 0, n


def test_labels_per_section(cuda_fixtures, scanned):
    for name in cuda_fixtures.names:
        spec = cuda_fixtures.manifest["fixtures"][name]
        rec = scanned[name]
        assert rec.error is None, (name, rec.error)
        assert rec.kind == spec["kind"], name
        got: dict[str, set[str]] = {}
        for e in rec.entries:
            got.setdefault(e.section, set()).add(e.arch)
        assert got == {k: set(v) for k, v in spec["sections"].items()}, name


def test_suffixes_kinds_and_flags(scanned):
    multi = scanned["multi.so"]
    by_label = {e.arch: e for e in multi.entries}
    assert by_label["sm_100f"].suffix == "f" and by_label["sm_100f"].sm == 100
    assert by_label["sm_90a"].suffix == "a"
    assert by_label["sm_110"].suffix == "" and by_label["sm_110a"].suffix == "a"
    assert by_label["compute_100f"].kind == "ptx" and by_label["compute_100f"].suffix == "f"
    assert all(e.loadable for e in multi.entries)
    assert multi.containers >= 2  # one per translation unit (+ the device-linked image)
    lto = scanned["lto.o"]
    assert {e.kind for e in lto.entries} == {"lto-ir"}
    assert not any(e.loadable for e in lto.entries)
    rdc = scanned["rdc.so"]
    assert rdc.relocatable_containers >= 1
    assert all(not e.loadable for e in rdc.entries if e.section == "__nv_relfatbin")
    assert all(e.loadable for e in rdc.entries if e.section == ".nv_fatbin")
    # the relocatable copy of compute_80 is not something the driver can load
    assert "compute_80" not in {c.label for c in file_codes(rdc)}
    rel = scanned["rel_sm_80.cubin"]
    assert rel.entries[0].loadable is False and file_codes(rel) == []
    assert scanned["sm_100f.cubin"].entries[0].suffix == "f"  # from .note.nv.tkinfo
    assert scanned["sm_90a.cubin"].entries[0].suffix == "a"  # from .nv.compat (CUDA 13)
    assert scanned["sm_120.cubin"].entries[0].suffix == ""


def test_compression(cuda_fixtures, scanned):
    for name in cuda_fixtures.names:
        want = cuda_fixtures.manifest["fixtures"][name].get("compression")
        if not want:
            continue
        for e in scanned[name].entries:
            if e.kind in want:
                assert e.compression == want[e.kind], (name, e.arch)
                if e.compression:
                    assert e.uncompressed_size and e.uncompressed_size > 0
                else:
                    assert e.uncompressed_size is None


def test_ptx_isa(cuda_fixtures, scanned):
    isa = _expected_isa(cuda_fixtures.manifest.get("nvcc"))
    ptx = [e for rec in scanned.values() for e in rec.entries if e.kind == "ptx"]
    assert len(ptx) >= 6
    for e in ptx:
        assert re.fullmatch(r"\d+\.\d+", e.ptx_isa or ""), e
        if isa:
            assert e.ptx_isa == isa
    for e in (
        e for rec in scanned.values() for e in rec.entries if e.kind == "sass" and e.section != "cubin"
    ):
        assert e.ptx_isa is None and e.code_version in ("1.7", "1.8")


def test_kernels_per_code(cuda_fixtures, scanned):
    """The demangled kernel -> targets index matches the -gencode lists of each translation unit."""
    for name in cuda_fixtures.names:
        want = cuda_fixtures.manifest["fixtures"][name]["kernels"]
        got = {k: sorted(c.label for c in codes) for k, codes in kernel_codes(scanned[name]).items()}
        got = {k: v for k, v in got.items() if v}
        assert got == {k: sorted(v) for k, v in want.items()}, name


def test_cuobjdump_listings_agree(cuda_fixtures, scanned, cuobjdump):
    if cuobjdump is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    rep = verify_files(list(scanned.values()), cuobjdump)
    assert rep.errors == []
    assert rep.disagreements == []
    assert rep.files_checked == len([r for r in scanned.values() if r.kind != "ptx"])


def _cuobjdump_blocks(tool: str, path: str, flag: str) -> list[tuple[str | None, list[str]]]:
    out = subprocess.run([tool, flag, path], capture_output=True, text=True, timeout=300, check=False).stdout
    header = "Fatbin elf code:" if flag == "-symbols" else "Fatbin ptx code:"
    blocks = out.split(header) if header in out else [out]
    res = []
    for b in blocks[1:] if header in out else blocks:
        m = re.search(r"arch = (\S+)", b)
        if flag == "-symbols":
            names = [ln.split()[-1] for ln in b.splitlines() if ln.startswith("FUNC") and " ENTRY " in ln]
        else:
            names = re.findall(r"\.entry\s+([\w$.]+)", b)
        res.append((m.group(1) if m else None, names))
    return res


def test_cuobjdump_kernels_per_entry(cuda_fixtures, scanned, cuobjdump):
    if cuobjdump is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    checked = 0
    for name in cuda_fixtures.names:
        rec = scanned[name]
        path = str(cuda_fixtures.path(name))
        if rec.kind == "ptx" or not any(e.kind in ("sass", "ptx") for e in rec.entries):
            continue
        has_exec = any(e.section != "__nv_relfatbin" for e in rec.entries)
        ours = [e for e in rec.entries if (e.section != "__nv_relfatbin") == has_exec]
        for kind, flag in (("sass", "-symbols"), ("ptx", "-ptx")):
            mine = [
                (e.arch if e.section != "cubin" else None, sorted(e.kernels or []))
                for e in ours
                if e.kind == kind
            ]
            theirs = [
                (a if rec.kind != "cubin" else None, sorted(n))
                for a, n in _cuobjdump_blocks(cuobjdump, path, flag)
            ]
            if not mine:
                continue
            # cuobjdump -symbols/-ptx print the fatbin header arch (sm_100f) and, for PTX, "sm_"
            theirs = [(a.replace("sm_", "compute_") if a and kind == "ptx" else a, n) for a, n in theirs]
            assert Counter(map(repr, mine)) == Counter(map(repr, theirs)), (name, kind)
            checked += 1
    assert checked >= 10


def test_fatbin_headers_agree_with_embedded_cubins(cuda_fixtures):
    """Decompress every SASS payload: its own ELF header names the same SM (and `a` where the
    fatbin flags say `a`); `f` exists only in the fatbin flags and the ptxas command line."""
    from probe.arch import elf, fatbin

    checked = 0
    for name in cuda_fixtures.names:
        data = cuda_fixtures.path(name).read_bytes()
        r = elf.Reader.from_buffer(data)
        regions = [(0, len(data), "fatbin")] if data[:4] == fatbin.FATBIN_MAGIC_BYTES else []
        if data[:4] == elf.ELF_MAGIC and not elf.parse_header(r).is_cuda:
            regions = [(s.offset, s.offset + s.size, s.name) for s in elf.device_sections(r)]
        for start, end, sec in regions:
            for e in fatbin.walk_region(r, start, end, section=sec).entries:
                if e.kind != "sass":
                    continue
                info = elf.cubin_info(elf.Reader.from_buffer(fatbin.payload(r, e)))
                assert info.sm == e.arch, (name, e.label)
                assert info.abi_version == e.minor == 8  # code version [1,8] <=> ELF ABI 8 (CUDA 13)
                if e.suffix:
                    assert info.suffix == e.suffix, (name, e.label, info)
                checked += 1
    assert checked >= 20
