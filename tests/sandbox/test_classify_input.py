# ruff: noqa: E501
"""Robustness of `probe classify` input handling (empty, binary, CRLF / ANSI / non-UTF-8, wrappers,
warnings, progress bars) and the literal pre-check of the signature matcher on the real-log corpus
(tests/data/logs; the corpus itself is scored by test_classify_corpus.py)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from probe.catalog.signatures import signature_db
from probe.outcomes import Outcome
from probe.sandbox.classify import classify_stream, classify_text, looks_binary
from probe.sandbox.logtext import LineMatcher
from tests.sandbox.evaluate_classify import CORPUS, find_collections

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "probe", "classify", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_empty_input_is_a_clear_error_unless_the_exit_status_is_known():
    p = _cli("-", "--json", stdin=b"")
    assert p.returncode == 6 and b"empty" in p.stderr and b"Traceback" not in p.stderr
    p = _cli("-", "--json", stdin=b"\n  \n")
    assert p.returncode == 6
    p = _cli("-", "--json", "--exit-code", "255", stdin=b"")
    assert p.returncode == 0 and json.loads(p.stdout)["outcome"] == "crashed"


def test_binary_garbage_is_rejected():
    data = bytes(range(256)) * 400
    assert looks_binary(data)
    p = _cli("-", stdin=data)
    assert p.returncode == 6 and b"binary" in p.stderr and b"Traceback" not in p.stderr
    assert not looks_binary(b"INFO ok\nRuntimeError: CUDA error: out of memory\n")


def test_crlf_ansi_and_non_utf8():
    log = (
        b"\x1b[1;36m(EngineCore_DP0 pid=1)\x1b[0;0m \x1b[0;31mERROR\x1b[0m 05-10 12:00:01 [core.py:700] caf\xe9 \xff\r\n"
        b"\x1b[0;31mERROR\x1b[0m 05-10 12:00:01 [core.py:700] RuntimeError: CUDA error: an illegal memory access was encountered\r\n"
        b"Aborted (core dumped)\r\n"
    )
    v = classify_stream(io.BytesIO(log))
    assert v.outcome is Outcome.DEVICE_FAULT and v.line_number == 2
    assert "\x1b" not in v.root_cause and "\r" not in v.root_cause
    p = _cli("-", "--json", stdin=log)
    assert p.returncode == 0 and json.loads(p.stdout)["outcome"] == "device_fault"


def test_wrapper_only_log_names_the_wrapper_and_claims_no_cause():
    log = (
        "(EngineCore_DP0 pid=9) ERROR 05-10 12:00:01 [core.py:700] EngineCore failed to start.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    v = classify_text(log)
    assert v.outcome is Outcome.CRASHED and "EngineCore failed to start" in v.root_cause
    assert v.hint.startswith("only wrapper lines found")


def test_python_warning_lines_never_fail_a_run():
    log = (
        "/usr/lib/python3/dist-packages/vllm/connections.py:8: RuntimeWarning: Failed to read commit hash:\n"
        "No module named 'vllm._version'\n"
        "  from vllm.version import __version__ as VLLM_VERSION\n"
        "/x/attn.py:3: UserWarning: FlashAttention is not supported on this GPU\n"
        "  warnings.warn(msg)\n"
        "INFO 01-01 00:00:00 [api_server.py:1] Application startup complete.\n"
    )
    assert classify_text(log).outcome is Outcome.OK
    # ...but a real error right after the warning's source line is still seen
    v = classify_text(log + "ModuleNotFoundError: No module named 'flashinfer'\n")
    assert v.outcome is Outcome.IMPORT_ERROR and "flashinfer" in v.root_cause


def test_finished_progress_bar_is_not_a_hang():
    done = "Capturing CUDA graph shapes: 100%|██████| 35/35 [00:13<00:00,  2.51it/s]\n"
    assert classify_text(done).outcome is Outcome.OK
    stuck = "Capturing CUDA graph shapes:  40%|██    | 14/35 [00:05<00:08,  2.51it/s]\n"
    assert classify_text(stuck).outcome is Outcome.TIMEOUT


@pytest.mark.slow
def test_literal_gate_never_hides_a_match():
    """The literal pre-check is an optimisation only: same verdict as trying every signature."""
    db = signature_db()
    matcher = LineMatcher(db)
    by_priority = sorted(db.signatures, key=lambda s: -s.priority)
    logs = [p for c in find_collections(CORPUS) for p in sorted(c.glob("*.log"))]
    assert len(logs) >= 174
    lines = [ln for p in logs for ln in p.read_text(errors="replace").splitlines()]
    for ln in lines:
        brute = next((s for s in by_priority if s.pattern.search(ln)), None)
        assert matcher.best(ln) is brute, ln
        assert matcher.phase(ln) == next((p.phase for p in db.phases if p.pattern.search(ln)), None), ln
