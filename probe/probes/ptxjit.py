"""Does a compiled module run from PTX on this GPU? (child side, before its first kernel launch)

A module with no SASS for the GPU but PTX it can JIT (vLLM 0.26.0's ``_vllm_fa2_C`` on sm_90: sm_80 SASS
and compute_80 PTX only) makes the CUDA driver compile every kernel at its first launch, inside the
launching call: FA2's first prefill / decode took 75-180 s each on an H100 with no process and no log
line to show for it. The probe asks the same ELF / fatbin scan as ``probe scan`` (pure Python, no
torch) and, for a ``ptx-jit`` verdict, declares a ``jit`` phase around the first launches (the runner
then gives the cell its ``--jit-timeout`` instead of calling it a hang) and marks the result degraded.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from typing import Any

# FlashAttention's compiled modules, by FA version, as the installed vLLM ships them
FA_MODULES = {2: "vllm.vllm_flash_attn._vllm_fa2_C", 3: "vllm.vllm_flash_attn._vllm_fa3_C"}
DRIVER_CACHE_HINT = (
    "the driver keeps JIT results in ~/.nv/ComputeCache (CUDA_CACHE_PATH); raise CUDA_CACHE_MAXSIZE "
    "(e.g. 4294967296) so a large module's kernels stay cached across processes"
)


@lru_cache(maxsize=16)
def module_verdict(module: str, sm: int) -> dict[str, Any] | None:
    """The scan's verdict for ``module``'s shared object on ``sm`` (None: not found / not scannable)."""
    from probe.arch.describe import scan_file
    from probe.arch.verdicts import file_codes, verdict_for
    from probe.catalog.gpus import catalog

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    gpu = catalog().by_sm(sm)
    if spec is None or not spec.origin or gpu is None:
        return None
    record = scan_file(spec.origin)
    codes = file_codes(record)
    if record.error or not codes:
        return None
    decision = verdict_for(codes, gpu)
    return {"module": module, "file": spec.origin, **decision.to_dict()}


def fa_ptx_jit(fa_version: Any, sm: int) -> str | None:
    """A degraded reason when FlashAttention ``fa_version``'s module runs from PTX JIT on ``sm``."""
    module = FA_MODULES.get(int(fa_version)) if fa_version else None
    if module is None:
        return None
    v = module_verdict(module, sm)
    if not v or v["verdict"] != "ptx-jit":
        return None
    return (
        f"{module.rsplit('.', 1)[-1]} has no SASS for sm_{sm}: the driver JIT-compiles its {v['via']} PTX "
        f"at each kernel's first launch (minutes for FlashAttention)"
    )
