"""Real PyPI wheels: probe's scan straight from the .whl agrees with cuobjdump on the unpacked members,
and the backend catalog's kernel patterns match the kernels that really ship.

- bitsandbytes 0.50.2 (43 MB; LZ4- and zstd-compressed fatbins): a few seconds, ``slow`` like the rest.
- vLLM 0.33.0 (336 MB) + flashinfer-cubin 0.6.13 (458 MB): ``slow``; they check the headline
  facts (FA3 none off Hopper, TRT-LLM MoE none on sm_110/120/121, Marlin MoE 8.0+PTX / 12.0f).
Downloads are cached under ~/.cache/probe-tests (see wheels.py).
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from probe.arch.backend_view import backend_view
from probe.arch.cuobjdump import expected_listing, find_cuobjdump
from probe.arch.scanner import scan_paths
from probe.catalog.backends import catalog as backend_catalog
from probe.catalog.gpus import catalog, parse_target
from tests.arch import wheels

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def tool() -> str:
    found = find_cuobjdump()
    if found is None:
        pytest.skip("cuobjdump not found: pip install nvidia-cuda-cuobjdump (CI installs it)")
    return found


def _member(path: str) -> str:
    return path.split("!", 1)[1]


_LINE = {
    "elf": re.compile(r"^ELF file\s+\d+:\s+\S+\.(sm_\w+)\.cubin$"),
    "ptx": re.compile(r"^PTX file\s+\d+:\s+\S+\.(sm_\w+)\.ptx$"),
}


def _listing(tool: str, path: str, what: str) -> tuple[list[str], bool]:
    """cuobjdump --list-elf / --list-ptx labels, and whether cuobjdump itself gave up ("fatal")."""
    out = subprocess.run([tool, f"--list-{what}", path], capture_output=True, text=True, check=False)
    labels = [m.group(1) for line in out.stdout.splitlines() if (m := _LINE[what].match(line.strip()))]
    return labels, out.returncode != 0 and "fatal" in out.stderr


def _cross_check(records, root: Path, tool: str) -> tuple[int, list[str]]:
    """probe (from the wheel) vs cuobjdump (on the unpacked member): same --list-elf/--list-ptx labels.

    Returns (files that agree, files cuobjdump could not read to the end). For the latter, what
    cuobjdump printed before giving up must be a prefix of probe's listing.
    """
    agree, cuobjdump_failed = 0, []
    for rec in records:
        assert rec.error is None, (rec.path, rec.error)
        if not rec.entries:
            continue
        on_disk = str(root / _member(rec.path))
        want = dict(zip(("elf", "ptx"), expected_listing(rec), strict=True))
        failed = False
        for what in ("elf", "ptx"):
            got, fatal = _listing(tool, on_disk, what)
            if fatal:
                failed = True
                assert want[what][: len(got)] == got, (rec.path, what, got)
            else:
                assert Counter(got) == Counter(want[what]), (rec.path, what)
        if failed:
            cuobjdump_failed.append(_member(rec.path))
        else:
            agree += 1
    return agree, cuobjdump_failed


@pytest.mark.slow
def test_bitsandbytes_wheel_matches_cuobjdump(tool):
    whl = wheels.wheel("bitsandbytes")
    root = wheels.unpacked(whl, ".so")
    records = [r for r in scan_paths([str(whl)], kernels=False, use_cache=False) if r.path.endswith(".so")]
    assert len(records) >= 10
    agree, failed = _cross_check(records, root, tool)
    # cuobjdump 13.x stops with "Invalid ELF" inside libbitsandbytes_cuda121.so; probe reads all of it
    assert agree >= 6, failed
    comps = {e.compression for r in records for e in r.entries}
    assert {"lz4", "zstd"} <= comps  # both payload codecs really occur in this wheel
    # the same member scanned from disk and from the zip gives the same entries
    on_disk = {r.path: r for r in scan_paths([str(root / "bitsandbytes")], kernels=False, use_cache=False)}
    for rec in records:
        disk = on_disk[str(root / _member(rec.path))]
        assert [(e.kind, e.arch, e.compression, e.size) for e in disk.entries] == [
            (e.kind, e.arch, e.compression, e.size) for e in rec.entries
        ]


def _header_arches(tool: str, path: str) -> Counter[str]:
    """SASS arch labels as the fatbin headers say (``arch = sm_120f`` in ``cuobjdump -symbols``)."""
    out = subprocess.run([tool, "-symbols", path], capture_output=True, text=True, check=True).stdout
    arches: Counter[str] = Counter()
    kind = None
    for line in out.splitlines():
        if line.startswith("Fatbin "):
            kind = "elf" if "elf" in line else "ptx"
        elif (m := re.match(r"arch = (\S+)", line)) and kind == "elf":
            arches[m.group(1)] += 1
    return arches


@pytest.fixture(scope="module")
def vllm_scan():
    whl = wheels.wheel("vllm")
    return whl, scan_paths([str(whl)], kernels=True, use_cache=False)


@pytest.mark.slow
def test_vllm_wheel_matches_cuobjdump(vllm_scan, tool):
    whl, records = vllm_scan
    root = wheels.unpacked(whl, ".so")
    so = [r for r in records if r.path.endswith(".so")]
    agree, failed = _cross_check(so, root, tool)
    assert agree >= 9 and not failed, failed
    # the f suffixes cuobjdump's --list-elf loses are in the fatbin headers
    moe = next(r for r in so if r.path.endswith("vllm/_moe_C_stable_libtorch.abi3.so"))
    ours = Counter(e.arch for e in moe.entries if e.kind == "sass" and e.section == ".nv_fatbin")
    assert ours["sm_120f"] > 0
    assert ours == _header_arches(tool, str(root / _member(moe.path)))


@pytest.mark.slow
def test_vllm_backend_patterns_match_real_kernels(vllm_scan):
    _whl, records = vllm_scan
    cells = backend_view(records, catalog().gpus)
    # every compiled requirement whose file ships in the vLLM wheel matches real kernels
    for c in cells:
        if c.target != "sm_90":
            continue
        for r in c.requirements:
            if r.check == "code" and r.files and "vllm/" in r.files[0]:
                assert r.matched_kernels, (c.backend, c.variant, r.what)

    def v(backend: str, target: str, variant: str | None = None) -> str:
        return next(
            c.verdict
            for c in cells
            if c.backend == backend and c.target == target and (variant is None or c.variant == variant)
        )

    for t in ("sm_100", "sm_110", "sm_120"):
        assert v("attention.flash_attn.fa3", t) == "none"
    assert v("attention.flash_attn.fa3", "sm_90") == "sass"
    assert v("attention.flash_attn.fa2", "sm_80") == "sass"
    assert v("attention.flash_attn.fa2", "sm_90") == "ptx-jit"
    bf16 = "bf16 activations"
    assert v("moe.marlin", "sm_120", bf16) == "sass"
    assert v("moe.marlin", "sm_121", bf16) == "sass-compatible"
    for t in ("sm_90", "sm_100", "sm_110"):
        assert v("moe.marlin", t, bf16) == "ptx-jit"
    assert v("moe.cutlass", "sm_110", "nvfp4") == "none"  # 11.0f is in CMake, not in the PyPI wheel
    assert v("moe.cutlass", "sm_120", "nvfp4") == "sass"
    assert v("attention.flashmla", "sm_90") == "sass"
    assert v("attention.cutlass_mla", "sm_100") == "sass"


@pytest.mark.slow
def test_flashinfer_cubin_wheel_trtllm_moe():
    whl = wheels.wheel("flashinfer-cubin")
    records = scan_paths([str(whl)], kernels=True, use_cache=False)
    cubins = [r for r in records if r.path.endswith(".cubin")]
    assert len(cubins) == 15970 and not [r for r in cubins if r.error]
    gpus = [parse_target(t) for t in ("sm_100", "sm_103", "sm_110", "sm_120", "sm_121")]
    cells = backend_view(records, gpus, backends=["flashinfer_trtllm", "FLASHINFER_MLA"])
    trt = {c.target: c for c in cells if c.backend == "moe.flashinfer_trtllm"}
    assert trt["sm_100"].requirements[0].verdict == "sass"
    assert trt["sm_103"].requirements[0].verdict == "sass"
    # 2,108 Bmm cubins, each with its kernel and a ...GetSmemSize entry
    assert trt["sm_100"].requirements[0].matched_kernels == 2 * 2108
    for t in ("sm_110", "sm_120", "sm_121"):
        assert trt[t].verdict == "none", trt[t].reason
    mla = {c.target: c for c in cells if c.backend == "attention.flashinfer_mla"}
    assert mla["sm_100"].requirements[0].verdict == "sass"
    assert mla["sm_120"].verdict == "none"


def test_catalog_reference_matches_pins():
    ref = backend_catalog().reference
    assert ref["vllm"].startswith("0.33.0") and ref["flashinfer-cubin"] == "0.6.13"
