"""The GPUs visible here, read from the CUDA driver through ctypes (no torch import).

``cuInit``, ``cuDeviceGetCount``, ``cuDeviceGetAttribute`` (compute capability major = 75,
minor = 76) and ``cuDeviceGetName`` from ``libcuda.so.1``. Any failure (no driver, no device,
``CUDA_VISIBLE_DEVICES=""``) means "no local GPU": an empty list, never an exception.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

_CC_MAJOR = 75
_CC_MINOR = 76


@dataclass(frozen=True)
class LocalGpu:
    index: int
    name: str
    sm: int


def local_gpus(library: str = "libcuda.so.1") -> list[LocalGpu]:
    try:
        cuda = ctypes.CDLL(library)
    except OSError as exc:
        log.info("no CUDA driver library (%s): %s", library, exc)
        return []
    try:
        if cuda.cuInit(0) != 0:
            return []
        count = ctypes.c_int(0)
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return []
        out: list[LocalGpu] = []
        for i in range(count.value):
            dev = ctypes.c_int(0)
            if cuda.cuDeviceGet(ctypes.byref(dev), i) != 0:
                continue
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            if cuda.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, dev) != 0:
                continue
            if cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, dev) != 0:
                continue
            buf = ctypes.create_string_buffer(256)
            name = buf.value.decode(errors="replace") if cuda.cuDeviceGetName(buf, 256, dev) == 0 else ""
            out.append(LocalGpu(i, name or f"GPU {i}", major.value * 10 + minor.value))
        return out
    except (AttributeError, OSError, ValueError) as exc:
        log.info("CUDA driver query failed: %s", exc)
        return []
