"""On a real GPU: the driver's own answer (cuModuleLoadData) for every fixture container agrees
with probe's verdict (loadable or none) for that GPU."""

from __future__ import annotations

import ctypes

import pytest

from probe.arch import elf, fatbin
from probe.arch.describe import entry_from_raw, scan_file
from probe.arch.localgpu import local_gpus
from probe.arch.verdicts import entry_code, verdict_for
from probe.catalog.gpus import parse_target

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_ctx():
    gpus = local_gpus()
    if not gpus:
        pytest.skip("no NVIDIA GPU visible (libcuda.so.1 / cuInit / device count)")
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    yield cuda, gpus[0]
    cuda.cuDevicePrimaryCtxRelease(dev)


def _load(cuda, image: bytes) -> int:
    mod = ctypes.c_void_p()
    buf = ctypes.create_string_buffer(image + b"\0")
    rc = cuda.cuModuleLoadData(ctypes.byref(mod), buf)
    if rc == 0:
        cuda.cuModuleUnload(mod)
    return rc


def test_driver_agrees_with_verdicts(cuda_fixtures, cuda_ctx):
    cuda, lg = cuda_ctx
    gpu = parse_target(f"sm_{lg.sm}")
    ver = ctypes.c_int(0)
    assert cuda.cuDriverGetVersion(ctypes.byref(ver)) == 0
    driver = (ver.value // 1000, ver.value % 1000 // 10)
    checked = 0
    for name in cuda_fixtures.names:
        path = cuda_fixtures.path(name)
        rec = scan_file(str(path))
        data = path.read_bytes()
        images: list[tuple[bytes, list]] = []
        if rec.kind in ("cubin", "ptx", "fatbin"):
            images.append((data, [c for e in rec.entries if (c := entry_code(e))]))
        elif rec.kind == "elf":
            r = elf.Reader.from_buffer(data)
            for sec in elf.device_sections(r):
                if sec.name != ".nv_fatbin":
                    continue
                res = fatbin.walk_region(r, sec.offset, sec.offset + sec.size, section=sec.name)
                for i, (off, size) in enumerate(res.spans):
                    entries = [entry_from_raw(e, None) for e in res.entries if e.container == i]
                    images.append((data[off : off + size], [c for e in entries if (c := entry_code(e))]))
        for image, codes in images:
            d = verdict_for(codes, gpu)
            expect = d.verdict.loadable
            if d.verdict.value == "ptx-jit" and d.min_driver:  # PTX newer than the driver: error 222
                need = tuple(int(x) for x in d.min_driver.split("."))
                expect = expect and need <= driver
            rc = _load(cuda, image)
            assert (rc == 0) == expect, (name, [c.label for c in codes], rc)
            checked += 1
    assert checked >= 15
