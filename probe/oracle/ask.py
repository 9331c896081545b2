"""Ask vLLM about one model on one GPU, now: ``probe recommend --ask-vllm PY``.

The published predictions cover the catalog's models; a model read from a config.json (any
architecture vLLM registers) has none. With a Python whose vLLM the answer is for (the image's), the
oracle child is run for that model on the asked GPU, per attention layer kind and for the experts'
own quant scheme (:mod:`probe.oracle.queries`), and its cells join the evidence. Answers are cached
(``$PROBE_CACHE_DIR/oracle/``) by what was asked and by the interpreter, so asking again is instant.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probe.cachedir import cache_dir
from probe.catalog.gpus import Gpu
from probe.catalog.profile import ModelProfile
from probe.oracle.collect import run_child
from probe.oracle.queries import plan
from probe.oracle.to_matrix import build_matrix


@dataclass(frozen=True)
class Asked:
    cells: list[dict[str, Any]]
    vllm: str | None
    skipped: str | None
    cached: bool


def _key(request: dict[str, Any], python: str) -> str:
    exe = Path(python).resolve()
    stamp = exe.stat().st_mtime_ns if exe.exists() else 0
    blob = json.dumps([request, str(exe), stamp], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def ask(
    profile: ModelProfile, gpu: Gpu, python: str, tp: int | None = None, timeout_s: float = 600.0
) -> Asked:
    """vLLM's own verdicts for ``profile`` on ``gpu``, from the vLLM of ``python`` (cached)."""
    request = plan([gpu], [profile], tps=(tp or 1,))
    path = cache_dir() / "oracle" / f"{_key(request.to_json(), python)}.json"
    try:
        hit = json.loads(path.read_text(encoding="utf-8"))
        return Asked(hit["cells"], hit.get("vllm"), hit.get("skipped"), True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    run = run_child(request, python=python, timeout_s=timeout_s)
    matrix = build_matrix(request, run)
    cells = [c.model_dump(mode="json") for c in matrix.cells]
    out = Asked(cells, run.versions.get("vllm"), run.skipped, False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(
            json.dumps({"cells": cells, "vllm": out.vllm, "skipped": out.skipped}), encoding="utf-8"
        )
    except OSError:
        pass  # a cache that cannot be written costs the next call its time, nothing else
    return out
