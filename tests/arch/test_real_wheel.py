"""Integration on a real PyPI wheel (bitsandbytes 0.50.2: CUDA 11.8 ... 13.2 builds, LZ4-compressed
CUDA 11/12 fatbins with ABI-7 cubins, CUDA 13 zstd ones, relocatable fatbins), read straight from
the .whl and cross-checked with cuobjdump member by member."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from probe.arch.cuobjdump import verify_files
from probe.arch.scanner import scan_paths

WHEEL = "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"
CACHE = Path.home() / ".cache" / "probe-tests" / "wheels"

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def bnb_wheel() -> Path:
    path = CACHE / WHEEL
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "bitsandbytes==0.50.2",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                "manylinux_2_24_x86_64",
                "--python-version",
                "3.11",
                "-d",
                str(CACHE),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if res.returncode != 0 or not path.exists():
            pytest.skip(f"cannot download {WHEEL}: {res.stderr.strip()[-300:]}")
    return path


def test_bitsandbytes_wheel(bnb_wheel, cuobjdump):
    files = scan_paths([bnb_wheel], use_cache=False)
    cuda = {Path(f.path.split("!")[1]).name: f for f in files if f.entries}
    assert set(cuda) == {f"libbitsandbytes_cuda{v}.so" for v in (118, 121, 124, 126, 128, 130, 132)}
    assert not any(f.error for f in files)
    assert all(f.package == "bitsandbytes" for f in files)
    old, new = cuda["libbitsandbytes_cuda118.so"], cuda["libbitsandbytes_cuda130.so"]
    assert "lz4" in {e.compression for e in old.entries if e.kind == "sass"}
    assert {e.code_version for e in old.entries if e.kind == "sass"} == {"1.7"}
    assert {e.code_version for e in new.entries if e.kind == "sass"} == {"1.8"}
    # real ABI-7 cubins (CUDA 11.8): decompress one LZ4 payload per arch, read its own ELF header
    import zipfile

    from probe.arch import elf, fatbin

    with zipfile.ZipFile(bnb_wheel) as zf:
        data = zf.read("bitsandbytes/libbitsandbytes_cuda118.so")
    r = elf.Reader.from_buffer(data)
    sec = next(s for s in elf.device_sections(r) if s.name == ".nv_fatbin")
    seen = set()
    for e in fatbin.walk_region(r, sec.offset, sec.offset + sec.size, section=sec.name).entries:
        if e.kind == "sass" and e.arch not in seen:
            info = elf.cubin_info(elf.Reader.from_buffer(fatbin.payload(r, e)))
            assert (info.abi_version, info.sm, info.suffix) == (7, e.arch, ""), e.label
            seen.add(e.arch)
    assert seen >= {60, 70, 75, 80, 86, 89, 90}
    assert any(e.section == "__nv_relfatbin" for e in new.entries)
    assert {e.arch for e in new.entries if e.loadable} >= {"sm_75", "sm_90", "sm_100", "sm_120"}
    if cuobjdump is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    rep = verify_files(list(cuda.values()), cuobjdump)
    assert rep.disagreements == []
    # cuobjdump 13.x itself aborts on some of these files ("Invalid ELF"); probe reads them all
    assert rep.files_agree + len(rep.errors) == 7 and rep.files_agree >= 5
