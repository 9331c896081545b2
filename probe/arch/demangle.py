"""C++ name demangling through the C++ runtime's ``__cxa_demangle`` (ctypes), with a fallback to the
mangled name when no C++ runtime is loadable or the name is not a mangled C++ name."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger(__name__)


@functools.cache
def _cxa() -> tuple[ctypes._CFuncPtr, ctypes._CFuncPtr] | None:  # type: ignore[name-defined]
    candidates = [
        "libstdc++.so.6",
        ctypes.util.find_library("stdc++"),
        "libc++.so.1",
        "libc++abi.so.1",
        "libc++.1.dylib",
    ]
    for name in candidates:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(None)
        free = libc.free
        free.argtypes = [ctypes.c_void_p]
        free.restype = None
        return fn, free
    log.info("no C++ runtime with __cxa_demangle found: kernel names stay mangled")
    return None


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """Demangled form of an Itanium-ABI name (``_Z...``); any other name is returned unchanged."""
    if not name.startswith("_Z"):
        return name
    cxa = _cxa()
    if cxa is None:
        return name
    fn, free = cxa
    status = ctypes.c_int(0)
    try:
        ptr = fn(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
    except (OSError, ValueError):
        return name
    if not ptr:
        return name
    try:
        out = ctypes.string_at(ptr)
    finally:
        free(ptr)
    if status.value != 0:
        return name
    return out.decode("utf-8", "replace")
