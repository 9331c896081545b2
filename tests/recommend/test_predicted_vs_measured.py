"""vLLM's own checks (published predictions) against what ran on the GPU: on sm_90, where the measured
image and the predicting image hold the same packages, they agree on at least 97% of the cells.

A measured cell is comparable when it is at a catalog model's shape (it names the model), its vLLM
version has published predictions, and its outcome says what vLLM's selection said: ``ok`` (vLLM
accepted the backend and it ran) or ``unsupported`` (vLLM refused it). Cells whose refusal or failure
came from a package the measured image lacked (``ImportError`` / ``No module named …``, or a backend
whose runtime package — the backend catalog's ``components.imports`` — the image's provenance does not
list: the H200 image had no FlashInfer) are image differences, not predictions to check, and are
counted apart; so are runtime failures (``device_fault``, ``wrong_output`` …), which no selection
check sees.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from probe.catalog.backends import catalog

ROOT = Path(__file__).resolve().parents[2]
MEASURED = sorted((ROOT / "matrices" / "measured").glob("nvidia-*-sm90-*.json"))
IMAGE_DIFFERENCE = re.compile(r"ImportError|No module named|not installed|is not available", re.I)


def _predictions(version: str) -> list[dict[str, Any]]:
    path = ROOT / "matrices" / "predicted" / f"vllm-{version}" / "sm_90.json.gz"
    if not path.is_file():
        pytest.skip(f"no published predictions of vLLM {version} for sm_90")
    cells = json.loads(gzip.decompress(path.read_bytes()))["cells"]
    # the measured runs used vLLM's default set-up: no FP8 KV cache, no expert parallelism
    default = [c for c in cells if not {"kv_cache_dtype", "ep"} & set(c.get("params") or {})]
    return [c for c in default if c.get("basis") == "vllm_check"]


def _lacks_runtime_package(c: dict[str, Any], versions: dict[str, Any]) -> bool:
    """The measured image is not known to hold a package the cell's backend imports (its provenance
    records no version of it: the H200 image had no FlashInfer, and no humming-kernels)."""
    needed = catalog().imports_of(c["kind"], str(c.get("backend")), c.get("fa_version"))
    return any(not versions.get(p["provenance"]) for p in needed)  # not recorded: not known to be there


def _key(c: dict[str, Any]) -> tuple[Any, ...]:
    return (c["kind"], c.get("model"), c.get("backend"), c.get("quant") if c["kind"] == "moe" else None)


def _predicted_ok(oracle: dict[str, Any], measured: dict[str, Any]) -> bool:
    """vLLM's verdict for the measured cell's backend (and forced FA version)."""
    ok = oracle["outcome"] == "ok"
    fa = measured.get("fa_version")
    forced = ((oracle.get("details") or {}).get("fa_forced") or {}).get(str(fa)) if fa else None
    if ok and isinstance(forced, dict):
        ok = bool(forced.get("ok")) and forced.get("runs") in (None, fa)
    return ok


def _tp_fits(oracle: dict[str, Any], measured: dict[str, Any]) -> bool:
    tps = (oracle.get("details") or {}).get("tp_sizes") or [oracle.get("tp") or 1]
    return measured["kind"] == "attention" or (measured.get("tp") or 1) in tps


def compare(measured_files: list[Path]) -> tuple[Counter[str], list[str]]:
    tally: Counter[str] = Counter()
    misses: list[str] = []
    for path in measured_files:
        doc = json.loads(path.read_text())
        versions = doc["provenance"]["versions"]
        version = versions["vllm"]
        by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for o in _predictions(version):
            by_key.setdefault(_key(o), []).append(o)
        for c in doc["cells"]:
            if c["kind"] not in ("moe", "attention") or not c.get("model"):
                continue
            lacked = IMAGE_DIFFERENCE.search(str(c.get("root_cause") or "")) or c["outcome"] == "import_error"
            if lacked or (c["outcome"] != "ok" and _lacks_runtime_package(c, versions)):
                tally["image difference"] += 1
                continue
            if c["outcome"] not in ("ok", "unsupported"):
                tally[f"runtime {c['outcome']}"] += 1
                continue
            oracle = next((o for o in by_key.get(_key(c), []) if _tp_fits(o, c)), None)
            if oracle is None:
                tally["not predicted"] += 1
                continue
            agree = _predicted_ok(oracle, c) == (c["outcome"] == "ok")
            tally["agree" if agree else "disagree"] += 1
            if not agree:
                misses.append(
                    f"{path.name}: {c['id']}: measured {c['outcome']}, vLLM's check {oracle['outcome']}"
                )
    return tally, misses


def test_vllms_checks_agree_with_the_measured_h100_and_h200_matrices():
    assert MEASURED, "no measured sm_90 matrix published"
    tally, misses = compare(MEASURED)
    compared = tally["agree"] + tally["disagree"]
    assert compared >= 200, tally  # the comparison itself covers most measured kernel cells
    assert tally["agree"] / compared >= 0.97, (tally, misses)
