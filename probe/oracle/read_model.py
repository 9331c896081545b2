"""Parent side of the vLLM-side model reader: run :mod:`probe.oracle.child_model` in an image's Python.

``read_with_vllm(paths, python=...)`` hands the child config.json files / model folders and returns
vLLM's own reading of each (per-layer attention kinds, KV-less layers, routed experts with their
quant scheme, the quant method vLLM resolves, whether the architecture is registered). The child runs
like the oracle's (:func:`probe.oracle.predict.run_child`): its own process, ``CUDA_VISIBLE_DEVICES``
emptied, a stub ``libcuda`` where there is no driver, only a ``probe`` link on ``PYTHONPATH``.

Nothing here imports torch or vLLM.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from probe.errors import InfraError
from probe.oracle.predict import _child_env

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
    with tempfile.TemporaryDirectory(prefix="probe-model-reader-") as tmp:
        try:
            proc = subprocess.run(
                [exe, "-m", "probe.oracle.child_model"],
                input=json.dumps(request),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=_child_env(list(pythonpath or []), Path(tmp)),
                cwd=tmp,
                check=False,
            )
        except FileNotFoundError as exc:
            raise InfraError(f"cannot run {exe}: {exc}") from exc
        except subprocess.TimeoutExpired as exc:
            raise InfraError(f"model reader ({exe}) timed out after {timeout_s:.0f} s") from exc
    lines = [ln for ln in (proc.stdout or "").splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or "")[-4000:]
        raise InfraError(f"model reader ({exe}) exited {proc.returncode} without an answer:\n{tail}")
    out: dict[str, Any] = json.loads(lines[-1])
    if out.get("skipped"):
        raise InfraError(f"model reader ({exe}) could not use vLLM: {out['skipped']}")
    return out
