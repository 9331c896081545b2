"""ELF header / section table and fatbin walker on hand-made inputs: every layout rule."""

from __future__ import annotations

import struct

import pytest

from probe.arch import elf, fatbin
from probe.arch.scanner import scan_file
from tests.arch import synth


def reader(b: bytes) -> elf.Reader:
    return elf.Reader.from_buffer(b)


@pytest.mark.parametrize(
    ("abi", "flags", "sm", "suffix"),
    [
        (7, 0x004B054B, 75, ""),  # ABI 7: SM in the low byte
        (7, 0x00500550, 80, ""),
        (7, 0x005A0D5A, 90, "a"),  # 0x800 = arch-specific in ABI 7
        (8, 0x06005A04, 90, ""),  # ABI 8: SM in bits 8..15
        (8, 0x0600640A, 100, "a"),  # CUDA 12.9 ptxas: 0x8 = arch-specific
        (8, 0x06007802, 120, ""),  # 0x800 is inside the SM byte here: must not read as "a"
        (8, 0x06006E02, 110, ""),
    ],
)
def test_cubin_sm_and_a_from_e_flags(abi, flags, sm, suffix):
    info = elf.cubin_info(reader(synth.elf64(abi=abi, flags=flags)))
    assert (info.sm, info.suffix, info.abi_version) == (sm, suffix, abi)


def test_cubin_nv_compat_and_tkinfo():
    compat = bytes.fromhex("02090100 020c0000 02020100")
    a = synth.elf64(flags=0x06006402, sections=[(".nv.compat", elf.SHT_CUDA_COMPAT, compat)])
    assert elf.cubin_info(reader(a)).suffix == "a"
    compat0 = bytes.fromhex("04040400 01020304 02090000")  # a format-4 record first, then attr 9 = 0
    assert (
        elf.cubin_info(
            reader(synth.elf64(flags=0x06006402, sections=[(".nv.compat", elf.SHT_CUDA_COMPAT, compat0)]))
        ).suffix
        == ""
    )
    note = (
        b"\x0c\0\0\0\x40\0\0\0\xd0\x07\0\0NVIDIA Corp\0ptxas\0"
        b"Cuda compilation tools, release 13.0, V13.0.88\0-arch sm_100f -m 64 \0"
    )
    f = synth.elf64(flags=0x06006402, sections=[(".note.nv.tkinfo", 7, note)])
    info = elf.cubin_info(reader(f))
    assert (info.sm, info.suffix, info.toolkit, info.ptxas_arch) == (100, "f", "13.0", "sm_100f")


def test_elf_errors():
    with pytest.raises(elf.ElfParseError, match="not an ELF"):
        elf.parse_header(reader(b"MZ\0\0" * 20))
    b32 = b"\x7fELF\x01\x01\x01" + b"\0" * 60
    with pytest.raises(elf.ElfParseError, match="32-bit"):
        elf.parse_header(reader(b32))
    with pytest.raises(elf.ElfParseError, match="truncated"):
        elf.parse_header(reader(b"\x7fELF\x02\x01\x01"))
    good = synth.elf64(machine=62, sections=[(".nv_fatbin", 1, synth.container(synth.entry(2, 80)))])
    assert [s.name for s in elf.device_sections(reader(good))] == [".nv_fatbin"]
    with pytest.raises(elf.ElfParseError):
        elf.device_sections(reader(good[: len(good) - 10]))  # section table cut
    with pytest.raises(elf.ElfParseError, match="not a CUDA cubin"):
        elf.cubin_info(reader(good))


def test_fast_section_reader_matches_pyelftools(cuda_fixtures):
    for name in ("multi.so", "rdc.so", "sm_90a.cubin", "lto.o"):
        data = cuda_fixtures.path(name).read_bytes()
        fast = [(s.name, s.offset, s.size) for s in elf.parse_sections(reader(data))]
        assert fast == elf.section_names_pyelftools(data), name


def test_walk_kinds_suffixes_compression():
    c = synth.container(
        synth.entry(1, 80, b".version 9.0\n.target sm_80\n.entry k(\n", major=9, minor=0),
        synth.entry(2, 90, flags=0x100011),  # sm_90a
        synth.entry(2, 100, flags=0x1200011),  # sm_100f
        synth.entry(8, 90, flags=0x10011),  # LTO-IR
        synth.entry(0x40, 90, major=8, minor=7),  # relocatable PTX
        synth.entry(0x80, 100),  # Tile IR
        synth.entry(0x20, 0),  # index
        synth.entry(2, 86, b"x" * 24, flags=0x2011, csize=20, usize=100),
        synth.entry(2, 89, b"x" * 24, flags=0x8011, csize=21, usize=100, header_size=96),
    )
    res = fatbin.walk_region(reader(c + c), 0, 2 * len(c), section=".nv_fatbin")
    assert res.problems == []
    assert res.containers == 2
    got = [(e.kind, e.label, e.ptx_isa, e.compression, e.container) for e in res.entries[:9]]
    assert got == [
        ("ptx", "compute_80", "9.0", None, 0),
        ("sass", "sm_90a", None, None, 0),
        ("sass", "sm_100f", None, None, 0),
        ("lto-ir", "compute_90", None, None, 0),
        ("relocatable-ptx", "compute_90", "8.7", None, 0),
        ("tile-ir", "compute_100", None, None, 0),
        ("index", None, None, None, 0),
        ("sass", "sm_86", None, "lz4", 0),
        ("sass", "sm_89", None, "zstd", 0),
    ]
    assert res.entries[7].payload_length == 20 and res.entries[8].payload_length == 21
    assert res.entries[9].container == 1


def test_walk_concatenated_entry_emits_nested():
    c = synth.container(synth.concatenated([(2, 100, 0x1100011), (2, 120, 0x1200011)]), synth.entry(2, 80))
    res = fatbin.walk_region(reader(c), 0, len(c), section=".nv_fatbin")
    assert res.problems == []
    assert [(e.label, e.nested) for e in res.entries] == [
        ("sm_100a", True),
        ("sm_120f", True),
        ("sm_80", False),
    ]


def test_walk_padding_and_garbage():
    c = synth.container(synth.entry(2, 80))
    res = fatbin.walk_region(reader(c + b"\0" * 8 + c), 0, len(c) * 2 + 8, section=".nv_fatbin")
    assert (res.containers, res.problems) == (2, [])
    res = fatbin.walk_region(reader(c + b"garbage!" * 4), 0, len(c) + 32, section=".nv_fatbin")
    assert res.containers == 1 and "unexpected bytes" in res.problems[0]
    cut = c[:-8]
    res = fatbin.walk_region(reader(cut), 0, len(cut), section=".nv_fatbin")
    assert res.problems and "truncated" in res.problems[0]
    bad = bytearray(c)
    struct.pack_into("<I", bad, 16 + 4, 12)  # entry header size 12 < 64
    res = fatbin.walk_region(reader(bytes(bad)), 0, len(bad), section=".nv_fatbin")
    assert "bad header size" in res.problems[0]


def test_payload_decompression_errors():
    c = synth.container(synth.entry(2, 86, b"\xff" * 24, flags=0x8011, csize=20, usize=100))
    e = fatbin.walk_region(reader(c), 0, len(c), section="fatbin").entries[0]
    with pytest.raises(fatbin.FatbinParseError, match="does not decompress"):
        fatbin.payload(reader(c), e)
    with pytest.raises(fatbin.FatbinParseError, match="implausible"):
        fatbin.decompress(b"x", "zstd", 1 << 40)


def test_scan_synthetic_host_elf_with_both_sections(tmp_path):
    nv = synth.container(synth.entry(2, 90, flags=0x100011), synth.entry(1, 90, major=9, minor=0))
    rel = synth.container(synth.entry(2, 80))
    p = tmp_path / "libx.so"
    p.write_bytes(
        synth.elf64(machine=62, e_type=3, sections=[(".nv_fatbin", 1, nv), ("__nv_relfatbin", 1, rel)])
    )
    rec = scan_file(str(p))
    assert rec.error is None and rec.kind == "elf"
    assert (rec.containers, rec.relocatable_containers) == (1, 1)
    assert [(e.section, e.arch, e.loadable, e.container) for e in rec.entries] == [
        (".nv_fatbin", "sm_90a", True, 0),
        (".nv_fatbin", "compute_90", True, 0),
        ("__nv_relfatbin", "sm_80", False, 1),
    ]
