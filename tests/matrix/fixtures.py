"""Committed fixture matrices, built from real CellResult objects with probe's own build_matrix.

Regenerate:  python3 -m tests.matrix.fixtures   (a test checks the committed files match)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from probe.cells import CellResult
from probe.matrix.build import build_matrix, write_matrix
from probe.outcomes import Outcome

DATA = Path(__file__).resolve().parent / "data"
EVIL = "<script>alert('x')</script> <img src=x onerror=alert(1)> & \"quoted\""

VERSIONS = {
    "python": "3.12.3",
    "torch": "2.11.0",
    "torch_cuda": "13.0",
    "cuda_runtime": "13.0.88",
    "driver": "580.00",
    "vllm": "0.26.0",
    "flashinfer": "0.6.13",
    "flashinfer_cubin": "0.6.13",
    "flash_attn": None,
    "triton": "3.5.0",
}


def _static(moe_c_arches: list[str]) -> dict[str, Any]:
    return {
        "source": "site-packages of the image",
        "packages": {"vllm": "0.26.0", "torch": "2.11.0", "flashinfer-cubin": "0.6.13"},
        "targets": ["sm_90", "sm_110", "sm_120"],
        "files": [
            {"path": "vllm/_C.abi3.so", "package": "vllm", "arches": ["sm_110a", "sm_80", "sm_90"]},
            {
                "path": "vllm/_moe_C.abi3.so",
                "package": "vllm",
                "arches": moe_c_arches,
                "kernels": [{"name": "marlin_moe_wna16::Marlin", "arches": moe_c_arches}],
            },
            {
                "path": "flashinfer/data/fused_moe_103.so",
                "package": "flashinfer",
                "arches": ["sm_100a", "sm_103a"],
                "kernels": [{"name": "cutlass_fused_moe_sm100", "arches": ["sm_100a", "sm_103a"]}],
            },
        ],
        "backends": {
            "marlin": {
                "sm_110": {
                    "verdict": "sass",
                    "reason": "sm_110a SASS in _moe_C.abi3.so",
                    "via": "sm_110a",
                    "files": ["vllm/_moe_C.abi3.so"],
                },
                "sm_120": {"verdict": "ptx-jit", "reason": "only compute_80 PTX", "via": "compute_80"},
            },
            "cutlass": {
                "sm_110": {"verdict": "sass", "reason": "sm_110a SASS in _C.abi3.so", "via": "sm_110a"},
                "sm_120": {"verdict": "none", "reason": "no sm_120 code in _C.abi3.so"},
            },
            "flashinfer_cutlass": {
                "sm_110": {"verdict": "none", "reason": "fused_moe_103.so has sm_100a, sm_103a only"},
                "sm_120": {"verdict": "jit", "reason": "JIT-compiled by FlashInfer"},
            },
            "TRITON_ATTN": {
                "sm_110": {"verdict": "pure", "reason": "pure Triton"},
                "sm_120": {"verdict": "pure", "reason": "pure Triton"},
            },
            "FA3": {"sm_110": {"verdict": "none", "reason": "_vllm_fa3_C has sm_90a only"}},
        },
    }


def _moe(
    backend: str, model: str, e: int, h: int, i: int, outcome: Outcome, b1: float | None = None, **extra: Any
) -> CellResult:
    timings = {"forward_ms_b1": b1, "forward_ms_b64": b1 * 4.2} if b1 else {}
    return CellResult(
        id=f"moe/{backend}/nvfp4/E={e}/H={h}/I={i}/tp=1",
        kind="moe",
        params={
            "backend": backend,
            "quant": "nvfp4",
            "experts": e,
            "hidden": h,
            "intermediate": i,
            "top_k": 8,
            "tp": 1,
            "model": model,
        },
        outcome=outcome,
        timings=timings,
        wall_s=3.0,
        phase="forward" if outcome.passed else extra.pop("phase", "forward"),
        details={"vllm_version": "0.26.0"},
        **extra,
    )


def _attn(
    backend: str, fa: int | None, heads: int, outcome: Outcome, decode: float | None = None, **extra: Any
) -> CellResult:
    name = backend + (f"/fa{fa}" if fa else "")
    return CellResult(
        id=f"attention/{name}/H={heads}/KV=2/D=256",
        kind="attention",
        params={
            "backend": backend,
            "fa_version": fa,
            "num_heads": heads,
            "num_kv_heads": 2,
            "head_dim": 256,
            "model": None,
        },
        outcome=outcome,
        timings={"prefill_ms": decode * 20, "decode_ms": decode} if decode else {},
        wall_s=2.0,
        **extra,
    )


def results(variant: str) -> list[CellResult]:
    slow = 1.35 if variant == "regression" else (1.02 if variant == "unchanged" else 1.0)
    cutlass_ok = variant != "regression"
    rs = [
        CellResult(
            id="import/vllm",
            kind="import",
            outcome=Outcome.OK,
            wall_s=4.0,
            details={
                "versions": {"vllm": VERSIONS["vllm"] if variant != "regression" else "0.27.1"},
                "gpu": {"name": "NVIDIA Thor", "cc": "11.0", "integrated": True},
            },
        ),
        _moe(
            "marlin",
            "Qwen3.5-122B-A10B",
            256,
            3072,
            1024,
            Outcome.CRASHED,
            exit_code=255,
            phase="process_weights",
            root_cause="child exited with code 255 without a traceback during Marlin NVFP4 weight repack",
        ),
        _moe(
            "cutlass",
            "Qwen3.5-122B-A10B",
            256,
            3072,
            1024,
            Outcome.OK if cutlass_ok else Outcome.DEVICE_FAULT,
            0.41 if cutlass_ok else None,
            **({} if cutlass_ok else {"root_cause": "CUDA error: an illegal memory access was encountered"}),
        ),
        _moe(
            "flashinfer_cutlass",
            "Qwen3.5-122B-A10B",
            256,
            3072,
            1024,
            Outcome.NO_KERNEL_IMAGE,
            root_cause="no kernel image is available for execution on the device",
        ),
        _moe("marlin", "Qwen3.6-35B-A3B", 256, 2048, 512, Outcome.OK, round(0.21 * slow, 4)),
        _moe(
            "cutlass",
            "Qwen3.6-35B-A3B",
            256,
            2048,
            512,
            Outcome.OK if cutlass_ok else Outcome.DEVICE_FAULT,
            0.24 if cutlass_ok else None,
        ),
        _attn(
            "FLASHINFER",
            None,
            32,
            Outcome.API_MISMATCH,
            root_cause="BatchDecodeWithPagedKVCacheWrapper.run() got an unexpected keyword 'kv_cache_sf' "
            + EVIL,
            log_excerpt="Traceback ...\nTypeError: run() got an unexpected keyword 'kv_cache_sf'\n" + EVIL,
        ),
        _attn("TRITON_ATTN", None, 32, Outcome.OK, 0.050),
        _attn("TRITON_ATTN", None, 16, Outcome.OK, 0.031),
        _attn("FLASH_ATTN", 2, 16, Outcome.OK, 0.027),
        _attn("FLASH_ATTN", 3, 16, Outcome.DEVICE_FAULT, root_cause="CUDA error: unspecified launch failure"),
        CellResult(
            id="engine/Qwen3.5-122B-A10B/cutlass+TRITON_ATTN",
            kind="engine",
            params={
                "model": "Qwen3.5-122B-A10B",
                "moe_backend": "cutlass",
                "attention_backend": "TRITON_ATTN",
                "fa_version": None,
                "quant": "nvfp4",
            },
            outcome=Outcome.OK if cutlass_ok else Outcome.CRASHED,
            timings={"tokens_per_s": 24.0, "init_s": 80.0, "gen_s": 5.3} if cutlass_ok else {},
            exit_code=None if cutlass_ok else -11,
            signal=None if cutlass_ok else "SIGSEGV",
            wall_s=95.0,
        ),
    ]
    return rs


def matrix(variant: str) -> Any:
    prov = {
        "image": f"ghcr.io/example/vllm-thor:{ {'baseline': '2026-11-01'}.get(variant, '2026-11-08') }",
        "image_digest": "sha256:"
        + {"baseline": "1" * 64, "regression": "2" * 64, "unchanged": "3" * 64}[variant],
        "host": "thor-ci-01",
        "created_at": {"baseline": "2026-11-01T10:00:00Z"}.get(variant, "2026-11-08T10:00:00Z"),
        "probe_version": "0.1.0",
        "platform": "Linux-6.8 aarch64",
        "versions": copy.deepcopy(VERSIONS),
        "gpu": {
            "name": "NVIDIA Thor",
            "sm": 110,
            "cc": "11.0",
            "memory_gib": 122.0,
            "integrated": True,
            "unified_memory": True,
            "count": 1,
        },
    }
    if variant == "regression":
        prov["versions"]["vllm"] = "0.27.1"
    arches = ["sm_110a", "sm_80"] if variant != "regression" else ["sm_80"]
    return build_matrix(results(variant), provenance=prov, static=_static(arches))


def infra_failed() -> Any:
    m = matrix("unchanged")
    return m.model_copy(
        update={
            "run": m.run.model_copy(
                update={"status": "infra_failed", "infra_error": "could not start a worker"}
            )
        }
    )


FILES = {
    "baseline.json": lambda: matrix("baseline"),
    "current-regression.json": lambda: matrix("regression"),
    "current-unchanged.json": lambda: matrix("unchanged"),
    "current-infra-failed.json": infra_failed,
}


def main() -> int:
    for name, make in FILES.items():
        write_matrix(make(), DATA / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
