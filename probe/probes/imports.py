"""Import probe: versions, GPU facts, and which compiled modules / kernel libraries load here.

Target ``probe.probes.imports:run``. Checks vLLM and its compiled extensions (names per version
via :mod:`probe.probes.vllm_compat`), vllm_flash_attn FA2 / FA3 / FA4, FlashInfer (whether its
kernels come AOT from flashinfer-jit-cache, as cubins from flashinfer-cubin, or must JIT with
nvcc), DeepGEMM. A module that fails to import is recorded in ``details.modules`` with the error;
the cell itself is ``ok`` when vLLM and its core extension import, ``wrong_output`` never, and
a failing core import propagates (so the sandbox classifies it: undefined symbol, ABI, ...).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from probe.cells import ProbeContext
from probe.probes.common import result, skipped

DISTRIBUTIONS = (
    "torch",
    "vllm",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "triton",
    "nvidia-cutlass-dsl",
    "deep-gemm",
    "xformers",
    "transformers",
)


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _try_import(name: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        mod = importlib.import_module(name)
    except BaseException as exc:
        return {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}"[:500],
            "import_s": round(time.perf_counter() - t0, 3),
        }
    return {
        "ok": True,
        "file": getattr(mod, "__file__", None),
        "import_s": round(time.perf_counter() - t0, 3),
    }


def _driver_version() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def _flashinfer_status() -> dict[str, Any]:
    st: dict[str, Any] = {
        "python": _dist_version("flashinfer-python"),
        "cubin": _dist_version("flashinfer-cubin"),
        "jit_cache": _dist_version("flashinfer-jit-cache"),
        "nvcc": shutil.which("nvcc")
        or (str(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc") if os.environ.get("CUDA_HOME") else None),
        "ninja": shutil.which("ninja"),
    }
    if st["python"] is None:
        st["mode"] = "absent"
        return st
    imp = _try_import("flashinfer")
    st["import"] = imp
    if st["jit_cache"]:
        st["mode"] = "aot"  # prebuilt module .so's
    elif st["cubin"]:
        st["mode"] = "cubin"  # TRT-LLM-gen cubins present, the rest JIT
    elif st["nvcc"] and st["ninja"]:
        st["mode"] = "jit"  # everything compiles at first use
    else:
        st["mode"] = "unusable"  # no prebuilt kernels and no compiler
    return st


def run(params: dict[str, Any], ctx: ProbeContext) -> dict[str, Any]:
    ctx.phase("import")
    import torch

    from probe.probes import vllm_compat

    details: dict[str, Any] = {"versions": {n: _dist_version(n) for n in DISTRIBUTIONS}}
    details["versions"]["torch"] = torch.__version__
    details["versions"]["cuda_runtime"] = torch.version.cuda
    details["versions"]["driver"] = _driver_version()
    details["versions"]["triton"] = _dist_version("triton")
    if not torch.cuda.is_available():
        return skipped("no CUDA device visible to torch", details=details)
    prop = torch.cuda.get_device_properties(0)
    details["gpu"] = {
        "name": prop.name,
        "cc": f"{prop.major}.{prop.minor}",
        "sm": prop.major * 10 + prop.minor,
        "memory_gib": round(prop.total_memory / 2**30, 2),
        "multiprocessors": prop.multi_processor_count,
    }
    modules: dict[str, Any] = {}
    t0 = time.perf_counter()
    import vllm  # a failure here propagates: the sandbox classifies it

    details["versions"]["vllm"] = vllm.__version__
    modules["vllm"] = {"ok": True, "import_s": round(time.perf_counter() - t0, 3)}
    for name in vllm_compat.compiled_module_names():
        modules[name] = _try_import(name)
    for name in (
        "vllm.vllm_flash_attn._vllm_fa2_C",
        "vllm.vllm_flash_attn._vllm_fa3_C",
        "vllm.vllm_flash_attn.cute.interface",
        "vllm._flashmla_C",
        "vllm.third_party.deep_gemm",
        "deep_gemm",
        "triton_kernels",
        "vllm.third_party.triton_kernels",
    ):
        modules[name] = _try_import(name)
    details["modules"] = modules
    details["fa_versions"] = {
        str(k): ("ok" if v is None else v) for k, v in vllm_compat.fa_versions_available().items()
    }
    details["flashinfer"] = _flashinfer_status()
    accepted, _version = vllm_compat.runtime_moe_backends()
    details["moe_backends"] = accepted
    details["attention_backends"] = vllm_compat.runtime_attention_backends()
    core = vllm_compat.compiled_module_names()[0]
    if not modules[core]["ok"]:
        # the core extension is what every kernel needs: re-raise its error for the classifier
        importlib.import_module(core)
    return result("ok", None, timings={"import_vllm_s": modules["vllm"]["import_s"]}, details=details)
