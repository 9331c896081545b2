"""Multi-GPU questions answered from the published 2x H200 matrix (matrices/measured/*h200x2*): an answer
comes from engine runs at the asked layout (TP, DP, expert parallelism), single-GPU questions from
single-GPU runs, and a DP + EP question names the all2all backend that ran and rules out the one whose
engine failed there."""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.recommend.recommender import recommend
from probe.recommend.types import Deployment, Recommendation

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "matrices" / "measured" / "nvidia-h200x2-sm90-vllm-0.26.0.flashinfer-0.6.14.tp2.json"
pytestmark = pytest.mark.skipif(not MATRIX.is_file(), reason="no published 2-GPU matrix")


def _answer(tp: int | None = None, **deploy: object) -> Recommendation:
    return recommend("120b", gpu="sm_90", matrices=[MATRIX], tp=tp, deploy=Deployment(**deploy))


def test_dp_ep_question_answers_from_the_dp_run_with_its_all2all():
    out = _answer(dp=2, ep=True)
    flags = " ".join(out.flags)
    assert "--data-parallel-size 2 --enable-expert-parallel" in flags
    assert "--all2all-backend allgather_reducescatter" in flags
    assert out.engine_args.get("all2all_backend") == "allgather_reducescatter"
    (bad,) = [r for r in out.ruled_out if r["role"] == "all2all"]
    assert bad["backend"] == "flashinfer_nvlink_two_sided" and bad["outcome"] == "device_fault"
    assert "illegal memory access" in bad["reason"] and bad["source"] == "measured"
    assert any("allgather_reducescatter ran at DP=2 + EP" in n for n in out.notes)


def test_tp_ep_question_answers_from_the_tp_ep_run():
    out = _answer(tp=2, ep=True)
    flags = " ".join(out.flags)
    assert (
        "--tensor-parallel-size 2 --enable-expert-parallel" in flags and "--data-parallel-size" not in flags
    )
    assert "all2all_backend" not in out.engine_args
    assert not [r for r in out.ruled_out if r["role"] == "all2all"]  # DP runs do not speak for TP + EP


def test_single_gpu_question_is_answered_from_single_gpu_runs_only():
    out = _answer()
    assert "all2all_backend" not in out.engine_args
    assert not {"--tensor-parallel-size", "--data-parallel-size"} & set(out.flags)
    assert out.speed is None or "x DP" not in str(out.speed)
    assert not any("all2all" in n for n in out.notes)


def test_a_layout_nobody_ran_says_so():
    out = _answer(dp=4, ep=True)
    assert "--data-parallel-size 4" in " ".join(out.flags)
    assert any("no TP=1 x DP=4 engine run of gpt-oss-120b" in w for w in out.warnings)
    assert "all2all_backend" not in out.engine_args  # single-GPU evidence, not the DP=2 run
