"""Multi-GPU-only failure signatures (NCCL / torch.distributed time-outs, custom all-reduce, P2P,
symmetric memory) on real log excerpts (``tests/data/logs/multigpu``, sources in its index.json; every
log of the corpus is scored by test_classify_corpus.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.outcomes import Outcome
from probe.sandbox.classifier import classify_text

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs" / "multigpu"
INDEX = json.loads((LOGS / "index.json").read_text())


@pytest.mark.parametrize("entry", INDEX, ids=[e["file"] for e in INDEX])
def test_multigpu_log_cites_its_source(entry: dict) -> None:
    text = (LOGS / entry["file"]).read_text()
    assert text.startswith(f"# source: {entry['source']} ("), "fixture header must cite its source"
    assert entry["source"].startswith("https://github.com/")


def test_peer_access_beats_the_generic_cuda_check_line() -> None:
    line = (
        "Failed: Cuda error /x/csrc/custom_all_reduce.cuh:307 "
        "'peer access is not supported between these two devices'"
    )
    v = classify_text(line + "\n")
    assert v.outcome is Outcome.UNSUPPORTED and v.signature == "p2p-unsupported"
    assert v.hint and "--disable-custom-all-reduce" in v.hint


def test_fallback_warnings_do_not_fail_a_run() -> None:
    v = classify_text(
        "WARNING custom_all_reduce.py:166] Custom allreduce is disabled because it's not supported on more "
        "than two PCIe-only GPUs.\n"
        "SymmMemCommunicator: symmetric memory multicast operations are not supported.\n"
    )
    assert v.outcome is Outcome.OK and v.degraded and len(v.degraded_reasons) == 2


def test_watchdog_timeout_beats_the_worker_died_wrapper() -> None:
    v = classify_text((LOGS / "01_vllm_watchdog_allreduce_timeout.log").read_text())
    assert v.signature == "nccl-watchdog-timeout" and v.outcome is Outcome.TIMEOUT
