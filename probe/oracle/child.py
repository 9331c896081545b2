"""The oracle child: runs INSIDE a sandboxed subprocess that imports the image's own vLLM.

``python -m probe.oracle.child < request.json`` (the parent puts a directory holding only a
``probe`` link on ``PYTHONPATH``, so the image needs nothing of probe's dependencies: these modules
import the standard library, and vLLM / torch lazily). It reads one JSON request (targets x
attention queries x MoE queries, planned by :mod:`probe.oracle.collect`) from stdin and prints one
JSON answer on stdout.

No GPU is needed. How the target GPU is faked — only here, in this child
(:func:`probe.oracle._child_base.install_platform`):

1. Before anything resolves ``vllm.platforms.current_platform``, ``vllm.platforms._current_platform``
   is set to a proxy; once ``vllm.platforms.cuda`` is imported the proxy delegates to a subclass of
   ``NonNvmlCudaPlatform`` (the CUDA platform without NVML) whose ``get_device_capability`` /
   ``get_device_name`` return the current target. Every ``current_platform.is_cuda()`` /
   ``has_device_capability(90)`` / ``is_device_capability_family(100)`` inside vLLM then answers for
   the target, on a CPU-only machine as on a GPU box (whose real GPU is never touched).
2. ``torch.cuda.get_device_capability`` / ``get_device_name`` are patched the same way, for code
   that asks torch directly.
3. Attention (:mod:`probe.oracle.child_attention`): the platform's own
   ``get_attn_backend_cls(backend, AttentionSelectorConfig(...), num_heads)`` per backend — its
   ``ValueError`` is vLLM's refusal verbatim, each reason tied to the backend's ``supports_*``
   method (file:line) — and with ``None``: what ``auto`` picks, in ``_get_backend_priorities`` order.
4. MoE (:mod:`probe.oracle.child_moe`): each quant oracle's ``select_*_moe_backend`` with a
   ``FusedMoEConfig`` per ``--moe-backend`` value and ``auto``.

Installed-library facts still count: a backend whose module cannot import here (no FlashInfer,
no FA3 build) is refused with the ``ImportError`` text, exactly as vLLM itself would.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from typing import Any

from probe import versions
from probe.oracle._child_base import REFUSALS, install_platform, set_target


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("vllm", "torch", "flashinfer-python", "triton", "nvidia-cutlass-dsl"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _fa_availability() -> dict[str, str | None]:
    try:
        from vllm.vllm_flash_attn import flash_attn_interface as fai
    except REFUSALS as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {str(v): getattr(fai, f"FA{v}_UNAVAILABLE_REASON", None) for v in (2, 3, 4)}


def evaluate(request: dict[str, Any], adapter: dict[str, Any]) -> dict[str, Any]:
    install_platform()
    import contextlib

    try:
        from vllm.config import VllmConfig, set_current_vllm_config

        context: Any = set_current_vllm_config(VllmConfig())
    except REFUSALS:  # older layouts: the selectors fall back to their defaults
        context = contextlib.nullcontext()
    with context:
        return _evaluate(request, adapter)


def _evaluate(request: dict[str, Any], adapter: dict[str, Any]) -> dict[str, Any]:
    from probe.oracle.child_attention import AttentionOracle
    from probe.oracle.child_moe import MoeOracle

    attn = AttentionOracle(adapter["attention"])
    moe = MoeOracle(adapter["moe"])
    sms = [t["sm"] for t in request["targets"]]
    names = [attn.candidates(q, sms) for q in request.get("attention", [])]
    answers: list[dict[str, Any]] = []
    for target in request["targets"]:
        set_target(target)
        for i, q in enumerate(request.get("attention", [])):
            answers += [
                {"kind": "attention", "sm": target["sm"], "query": i, **a} for a in attn.evaluate(q, names[i])
            ]
        for i, q in enumerate(request.get("moe", [])):
            answers += [{"kind": "moe", "sm": target["sm"], "query": i, **a} for a in moe.evaluate(q)]
    return {"answers": answers, "moe_backends": moe.backends}


def main() -> int:
    logging.disable(logging.WARNING)
    if os.environ.get("PROBE_ORACLE_LAZY") == "1":  # stub libcuda (no driver here): bind lazily
        sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
    request = json.load(sys.stdin)
    t0 = time.monotonic()
    out: dict[str, Any] = {"versions": {}, "skipped": None, "answers": []}
    try:
        out["versions"] = _versions()
        import vllm

        version = str(getattr(vllm, "__version__", "") or out["versions"].get("vllm") or "")
        out["versions"]["vllm"] = version
        reason = versions.oracle_skip_reason(version)
        adapter = versions.oracle_layout(version)
        if reason or adapter is None:
            out["skipped"] = reason
        else:
            out["adapter"] = adapter["name"]
            out.update(evaluate(request, adapter))
            out["fa"] = _fa_availability()
            out["libcuda_stub"] = os.environ.get("PROBE_ORACLE_LAZY") == "1"
    except REFUSALS as exc:
        out["skipped"] = f"oracle could not use this vLLM: {type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-3000:]
    out["wall_s"] = round(time.monotonic() - t0, 3)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
