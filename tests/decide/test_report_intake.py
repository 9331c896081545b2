"""probe report import: an issue thread's text read into a draft report (synthetic threads for each
reading rule; the held-out threads in tests/data/report_intake for the importer as a whole)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from probe.decide.report_intake import draft_from_text, draft_problems, outcome_of, thread_layout
from probe.decide.thread_facts import gpus_in, kind_in, split_thread, versions_in

ROOT = Path(__file__).resolve().parents[2]
THREADS = ROOT / "tests" / "data" / "report_intake"


def _thread(title: str, description: str, comments: str = "") -> str:
    text = f"# {title}\nsomeone · description · 2026-05-01\n{description}\n"
    if comments:
        text += f"other · comment · 2026-05-02\n{comments}\n"
    return text


def test_environment_gpu_line_beats_gpus_named_in_comments() -> None:
    text = _thread(
        "crash", "GPU                : 8x NVIDIA H200 (TP=8)\nit crashed", "same on my RTX 5090 (SM120)"
    )
    assert gpus_in(split_thread(text)) == [90]


def test_a_product_name_beats_an_sm_number_in_an_error_message() -> None:
    text = _thread("gpt-oss not running on RTX5090", "Assertion failed: sinks are only supported on SM90")
    assert gpus_in(split_thread(text)) == [120]


@pytest.mark.parametrize(
    ("words", "sm"),
    [
        ("on a 8xH200 node", 90),
        ("NVIDIA GeForce RTX 5090", 120),
        ("GPU DEVICE h800 x 8", 90),
        ("DGX Spark", 121),
    ],
)
def test_gpu_spellings(words: str, sm: int) -> None:
    assert gpus_in(split_thread(_thread("bug", words))) == [sm]


def test_a_family_word_counts_only_when_nothing_names_the_gpu() -> None:
    assert gpus_in(split_thread(_thread("bug", "NVIDIA GB10 (Grace Blackwell)"))) == [121]
    assert gpus_in(split_thread(_thread("bug", "fails on Blackwell"))) == [100]


def test_comments_are_read_only_when_the_description_names_no_gpu() -> None:
    assert gpus_in(split_thread(_thread("bug", "it fails", "I see it on B200 too"))) == [100]


def test_versions_from_collect_env_container_tags_and_nvcc() -> None:
    text = (
        "PyTorch version              : 2.10.0+cu130\nCUDA used to build PyTorch   : 13.0\n"
        "CUDA runtime version         : 13.0.88\nvLLM Version                 : 0.16.0rc2.dev294+g6a7b85d94\n"
        "flashinfer-python            : 0.6.3\nimage lmsysorg/sglang:v0.5.10.post1-cu130\n"
        "CUDA Driver Version: 580.126.09\nsglang-kernel: 0.4.1\n"
    )
    assert versions_in(text) == {
        "torch": "2.10.0+cu130", "cuda": "13.0.88", "vllm": "0.16.0rc2.dev294+g6a7b85d94",
        "flashinfer": "0.6.3", "sglang": "0.5.10.post1", "driver": "580.126.09",
    }  # fmt: skip
    assert versions_in("NVCC: Cuda compilation tools, release 12.9, V12.9.86") == {"cuda": "12.9"}
    assert versions_in("cuda 580.65") == {}  # a driver's shape is not a CUDA version


@pytest.mark.parametrize(
    ("title", "line", "kind"),
    [
        ("CutlassMoeFCRunner<FP4,FP4> outputs all zeros", None, "moe"),
        ("Cannot use FlashAttention-2 backend for head size 88", None, "attention"),
        ("RMSNorm failed: no kernel image", None, "other"),
        (
            "CUDA illegal instruction during decode",
            "CUDA error: an illegal instruction was encountered",
            "engine",
        ),
        ("Qwen3 MoE model dies", None, "engine"),
    ],
)
def test_kind_from_title_then_line(title: str, line: str | None, kind: str) -> None:
    assert kind_in(split_thread(_thread(title, "it broke")), line, None, failed=True) == kind


def test_an_info_line_the_thread_is_about_is_its_decisive_line() -> None:
    text = _thread(
        "vLLM does not support FA3 with fp8 kv cache",
        "INFO 01-29 01:53:21 cuda.py:185] Cannot use FlashAttention-2 backend for FP8 KV cache.",
    )
    outcome, line = outcome_of(split_thread(text))
    assert outcome == "unsupported" and line is not None and "Cannot use FlashAttention-2" in line


def test_a_hang_is_read_from_the_title_when_the_log_just_stops() -> None:
    outcome, _ = outcome_of(split_thread(_thread("Engine hangs after the batch drains", "INFO serving")))
    assert outcome == "timeout"


def test_a_thread_that_reports_nothing_failing_is_ok() -> None:
    assert outcome_of(split_thread(_thread("How do I pick a backend?", "Which flags?")))[0] == "ok"


def test_github_api_objects_read_back_through_the_same_layout() -> None:
    issue = {
        "title": "Marlin segfaults on B200",
        "user": {"login": "a"},
        "created_at": "2026-03-01T00:00:00Z",
        "body": "vLLM Version : 0.26.0\nGPU 0: NVIDIA B200",
    }
    comments = [{"user": {"login": "b"}, "created_at": "2026-03-02T00:00:00Z", "body": "same on H100"}]
    draft = draft_from_text(thread_layout(issue, comments), "https://github.com/vllm-project/vllm/issues/1")
    e = draft.entry
    assert (e["gpus"], e["versions"], e["outcome"], e["kind"], e["seen_in"]) == (
        [100],
        {"vllm": ["0.26.0"]},
        "crashed",
        "moe",
        "vllm",
    )
    assert e["symptom"] == "Marlin segfaults on B200" and e["date"] == "2026-03-01"


def test_a_complete_draft_validates_and_an_incomplete_one_says_what_is_missing() -> None:
    text = _thread(
        "Marlin MoE segfault on B200", "vllm==0.26.0\nUsing 'MARLIN' WNA16 MoE backend\nSegmentation fault"
    )
    full = draft_from_text(text, "https://github.com/vllm-project/vllm/issues/2")
    assert full.missing == [] and draft_problems(full.entry) == []
    bare = draft_from_text(_thread("it crashed", "Segmentation fault"), None)
    assert bare.missing == ["gpus", "versions", "backend"] and draft_problems(bare.entry)


def test_held_out_threads_keep_their_scores() -> None:
    sys.path.insert(0, str(ROOT))
    from tools.evaluate_intake import evaluate

    rows = evaluate(THREADS)
    fields = ("gpus", "versions", "kind", "backend", "outcome", "root_cause")
    right = {f: sum(1 for _, m, _ in rows if m[f]) for f in fields}
    assert len(rows) == 20
    # first pass (tests/data/report_intake/first_pass.txt): 13, 16, 4, 18, 13 of 20 and 7 of 14
    assert right == {"gpus": 20, "versions": 20, "kind": 20, "backend": 18, "outcome": 17, "root_cause": 11}


def test_cli_writes_the_draft_and_refuses_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "draft.json"
    run = [sys.executable, "-m", "probe", "report", "import"]
    r = subprocess.run(
        [*run, str(THREADS / "thread_1_2.txt"), "-o", str(out)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["draft"]["backend"] == "marlin" and doc["missing"] == [] and "confirm" in r.stderr
    for bad in (str(tmp_path / "none.txt"), "http://example.com/x", str(tmp_path)):
        r = subprocess.run([*run, bad], capture_output=True, text=True)
        assert r.returncode in (2, 6) and "Traceback" not in r.stderr, (bad, r.stderr)
