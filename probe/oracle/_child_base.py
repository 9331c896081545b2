"""Helpers shared by the oracle child's modules (runs only inside the sandboxed child).

Standard library at import time; vLLM / torch are imported lazily by :func:`install_platform`.
See :mod:`probe.oracle.child` for how the target GPU is faked.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import traceback
from pathlib import Path
from typing import Any

TARGET: dict[str, Any] = {"major": 9, "minor": 0, "name": "NVIDIA H100"}
REFUSALS = (ValueError, NotImplementedError, AssertionError, ImportError, OSError, RuntimeError)


def resolve(path: str) -> Any:
    """'pkg.mod:Name.attr' -> the object."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


def call(fn: Any, **kwargs: Any) -> Any:
    """Call ``fn`` with the keyword arguments its signature accepts (versions differ)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(**kwargs)
    return fn(**{k: v for k, v in kwargs.items() if k in params})


def _vllm_root() -> str:
    spec = importlib.util.find_spec("vllm")
    origin = spec.origin if spec and spec.origin else ""
    return str(Path(origin).parent.parent) if origin else ""


def _rel(path: str | None) -> str | None:
    if not path:
        return None
    root = _vllm_root()
    return os.path.relpath(path, root) if root and path.startswith(root) else path


def location(obj: Any) -> tuple[str | None, int | None]:
    """file (relative to site-packages) and first line of a function / method, when known."""
    try:
        fn = inspect.unwrap(getattr(obj, "__func__", obj))
        return _rel(inspect.getsourcefile(fn)), inspect.getsourcelines(fn)[1]
    except (TypeError, OSError):
        return None, None


def raise_site(exc: BaseException) -> tuple[str | None, int | None, str | None]:
    """The innermost traceback frame inside vLLM: where the refusal was raised."""
    best: tuple[str | None, int | None, str | None] = (None, None, None)
    for frame in traceback.extract_tb(exc.__traceback__):
        if f"{os.sep}vllm{os.sep}" in frame.filename:
            best = (_rel(frame.filename), frame.lineno, frame.name)
    return best


def message(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if text else type(exc).__name__


# --- platform faking -------------------------------------------------------------------------


class PlatformProxy:
    """Stands in for ``current_platform`` until (and after) the CUDA platform class is importable."""

    impl: Any = None

    def __getattr__(self, name: str) -> Any:
        if type(self).impl is None:
            raise AttributeError(f"oracle platform not ready ({name})")
        return getattr(type(self).impl, name)


def install_platform() -> None:
    """Make vLLM see a CUDA platform whose capability is ``TARGET`` (see the module docstring)."""
    import vllm.platforms as platforms

    platforms._current_platform = PlatformProxy()
    cuda = importlib.import_module("vllm.platforms.cuda")
    interface = importlib.import_module("vllm.platforms.interface")
    base = getattr(cuda, "NonNvmlCudaPlatform", None) or cuda.CudaPlatformBase
    cap_cls = interface.DeviceCapability

    class OraclePlatform(base):  # type: ignore[misc, valid-type]
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return cap_cls(TARGET["major"], TARGET["minor"])

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return str(TARGET["name"])

    PlatformProxy.impl = OraclePlatform()
    try:
        import torch

        torch.cuda.get_device_capability = lambda device=None: (TARGET["major"], TARGET["minor"])
        torch.cuda.get_device_name = lambda device=None: str(TARGET["name"])
    except ImportError:
        pass


def set_target(target: dict[str, Any]) -> None:
    TARGET.update(major=target["sm"] // 10, minor=target["sm"] % 10, name=target.get("name") or "")


_NEEDS_GPU = ("nvidia driver", "no cuda gpus", "cuda driver", "cudagetdevicecount", "cuda_visible_devices")


def needs_gpu(text: str) -> bool:
    """A check that touched the (absent) GPU: the oracle could not ask, vLLM did not refuse.

    Case-insensitive: without a driver vLLM says "Found no NVIDIA driver", with one but
    ``CUDA_VISIBLE_DEVICES`` emptied (the oracle child on a GPU box) torch says "No CUDA GPUs are available".
    """
    low = text.lower()
    return any(k in low for k in _NEEDS_GPU)
