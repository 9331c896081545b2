"""Cells whose result is unknown (``not_run``, or stopped while JIT-compiling) are no evidence either way:
``recommend`` never rules a backend out on one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.recommend.recommender import recommend

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "matrices" / "measured" / "nvidia-h100-sm90-vllm-0.26.0.json"
PREDICTED = ROOT / "matrices" / "predicted" / "vllm-0.26.0"

STOPS = {
    # older journals: a compile stop was journalled as a hang in phase jit
    "timeout": "probe: stopped while JIT-compiling fused_moe_90 after 1200 s of compiling; the JIT time "
    "limit of 1200 s was spent",
    "not_run": "compile budget exceeded after 200 s, 31 of 183 units built (fused_moe_90)",
}


def _stopped_copy(tmp_path: Path, outcome: str) -> tuple[Path, set[str]]:
    """The published H100 matrix with gpt-oss-120b's working flashinfer_cutlass cells turned into
    compile stops."""
    m = json.loads(H100.read_text())
    stopped = set()
    for c in m["cells"]:
        if "flashinfer_cutlass" in c["id"] and c.get("model") == "gpt-oss-120b" and c["outcome"] == "ok":
            c.update(outcome=outcome, phase="jit", root_cause=STOPS[outcome], timings={})
            stopped.add(c["id"])
    assert len(stopped) == 3  # bf16 and mxfp4 layer cells, the engine run
    out = tmp_path / "h100.json"
    out.write_text(json.dumps(m))
    return out, stopped


@pytest.mark.parametrize("outcome", sorted(STOPS))
def test_a_compile_stop_rules_no_backend_out(tmp_path, outcome):
    path, stopped = _stopped_copy(tmp_path, outcome)
    alone = recommend("gpt-oss-120b", matrices=[path])
    assert not {e["id"] for e in alone.evidence} & stopped
    with_predictions = recommend("gpt-oss-120b", matrices=[path, PREDICTED])
    assert with_predictions.found and with_predictions.moe_backend == "flashinfer_cutlass"
    assert not {e["id"] for e in with_predictions.evidence} & stopped


def test_not_run_cells_of_a_budgeted_run_are_not_failures(tmp_path):
    m = json.loads(H100.read_text())
    for c in m["cells"]:
        if c["kind"] == "attention":
            c.update(outcome="not_run", root_cause="run budget spent: not started", timings={}, phase=None)
    path = tmp_path / "h100.json"
    path.write_text(json.dumps(m))
    r = recommend("gpt-oss-120b", matrices=[path])
    assert not [e for e in r.evidence if e["outcome"] == "not_run"]
