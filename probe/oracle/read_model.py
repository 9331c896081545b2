"""Parent side of the vLLM-side model reader: run :mod:`probe.oracle.child_model` in an image's Python.

``read_with_vllm(paths, python=...)`` hands the child config.json files / model folders and returns
vLLM's own reading of each (per-layer attention kinds, KV-less layers, routed experts with their
quant scheme, the quant method vLLM resolves, whether the architecture is registered). The child runs
like the oracle's (:func:`probe.oracle.collect.run_child`): its own process, ``CUDA_VISIBLE_DEVICES``
emptied, a stub ``libcuda`` where there is no driver, only a ``probe`` link on ``PYTHONPATH``.

Nothing here imports torch or vLLM.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from probe.errors import InfraError
from probe.oracle.collect import child_answer

DEFAULT_TIMEOUT_S = 1800.0


def read_with_vllm(
    paths: list[str],
    python: str | None = None,
    pythonpath: list[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    sm: int = 100,
) -> dict[str, Any]:
    """vLLM's reading of each config (``{"vllm": version, "readings": [...]}``); InfraError if the
    child fails itself (a config vLLM refuses is a reading with an ``error``, not a failure)."""
    exe = python or sys.executable
    request = {"configs": [str(Path(p).resolve()) for p in paths], "sm": sm}
    out = child_answer("probe.oracle.child_model", request, "model reader", exe, pythonpath, timeout_s)
    if out.get("skipped"):
        raise InfraError(f"model reader ({exe}) could not use vLLM: {out['skipped']}")
    return out
