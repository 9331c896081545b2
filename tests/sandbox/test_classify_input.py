# ruff: noqa: E501
"""Robustness of `probe classify` input handling (empty, binary, CRLF / ANSI / non-UTF-8, wrappers,
warnings, progress bars; bounded reads: regular files and stdin only, head + tail of a big input, a
stream's limit) and the literal pre-check of the signature matcher on the real-log corpus
(tests/data/logs; the corpus itself is scored by test_classify_corpus.py)."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probe.catalog.signatures import signature_db
from probe.outcomes import Outcome
from probe.sandbox import loginput
from probe.sandbox.classifier import LogScanner, classify_stream, classify_text, looks_binary
from probe.sandbox.logtext import LineMatcher
from tests.sandbox.corpus import CORPUS, find_collections

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, stdin: bytes | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "probe", "classify", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
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


def test_a_progress_bar_is_a_hang_only_with_the_runners_evidence():
    done = "Capturing CUDA graph shapes: 100%|██████| 35/35 [00:13<00:00,  2.51it/s]\n"
    assert classify_text(done).outcome is Outcome.OK
    stuck = "Capturing CUDA graph shapes:  40%|██    | 14/35 [00:05<00:08,  2.51it/s]\n"
    assert classify_text(stuck).outcome is Outcome.OK  # an excerpt cut there reads the same
    v = classify_text(stuck, timed_out=True, completed=False)
    assert (v.outcome, v.phase) == (Outcome.TIMEOUT, "cuda_graph")


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


# -- bounded input: what is read, from what ------------------------------------------------------------
ANSI_ONLY = (
    b"\x1b[0m\x1b[1;32m\x1b[K\n\x1b]0;title\x07\n\x1b(B\x1b[m\n\x1b[?25l\x1b[2J\x1b[H\r\n\x1b7\x1b8\x07\n"
)


def _main(*args: str) -> int:
    """The CLI in this process (exit code; output through capsys)."""
    from probe.cli.main import main

    return main(["classify", *args])


def test_a_log_of_ansi_escapes_only_is_empty(tmp_path, capsys):
    sc = LogScanner()
    sc.feed_stream(io.BytesIO(ANSI_ONLY * 100))
    assert sc.text_lines == 0
    (tmp_path / "ansi.log").write_bytes(ANSI_ONLY)
    assert _main(str(tmp_path / "ansi.log")) == 6
    assert "is empty" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["device", "folder"])
def test_only_regular_files_are_read(tmp_path, capsys, kind):
    assert _main("/dev/zero" if kind == "device" else str(tmp_path)) == 6
    assert "regular files and stdin only" in capsys.readouterr().err


@pytest.mark.slow
def test_a_fifo_is_refused_without_being_opened(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)  # opening it for reading would block until a writer comes
    t0 = time.monotonic()
    p = _cli(str(path), timeout=20)
    assert p.returncode == 6 and b"a FIFO" in p.stderr and b"Traceback" not in p.stderr
    assert time.monotonic() - t0 < 20


@pytest.mark.slow
def test_stdin_from_dev_zero_stops_at_once():
    with open("/dev/zero", "rb") as zero:
        p = subprocess.run(
            [sys.executable, "-m", "probe", "classify", "-"],
            stdin=zero,
            capture_output=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            cwd=ROOT,
            timeout=20,
            check=False,
        )
    assert p.returncode == 6 and b"binary" in p.stderr


def _big_log(path: Path, middle_mib: int) -> None:
    noise = b"INFO 01-01 00:00:00 [x.py:1] step ok\n" * 28_000  # ~1 MiB
    with open(path, "wb") as f:
        f.write(b"WARNING the first line\n")
        f.write(noise * middle_mib)
        f.write(b"RuntimeError: CUDA error: an illegal instruction was encountered\n")  # mid-file: skipped
        f.write(noise * middle_mib)
        f.write(b"RuntimeError: CUDA error: an illegal memory access was encountered\n")


@pytest.mark.slow
def test_a_big_file_is_read_head_and_tail_only(tmp_path, capsys):
    log = tmp_path / "big.log"
    _big_log(log, 3)
    with open(log, "rb") as f:
        w = loginput.read_window(f)
    assert len(w.head) <= loginput.HEAD_BYTES and len(w.tail) <= loginput.TAIL_BYTES
    assert w.skipped == log.stat().st_size - loginput.HEAD_BYTES - loginput.TAIL_BYTES and w.complete
    assert w.head.startswith(b"WARNING the first line") and w.tail.endswith(b"encountered\n")
    with open(log, "rb") as f:
        v = classify_stream(f)
    # the cause in the skipped middle is not seen (the stated bound); the one at the end is, and its
    # line number is unknown (the skipped lines were not counted)
    assert v.outcome is Outcome.DEVICE_FAULT and "illegal memory access" in v.root_cause
    assert v.line_number is None
    assert _main(str(log), "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["input"]["skipped_bytes"] == w.skipped and out["input"]["complete"] is True


class _Endless(io.RawIOBase):
    """A stream of log lines that never ends (``yes``-like)."""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        line = b"INFO 01-01 00:00:00 [x.py:1] still going\n"
        n = len(b) - len(b) % len(line)
        b[:n] = line * (n // len(line))
        return n


def test_a_stream_is_read_up_to_its_limit(monkeypatch):
    monkeypatch.setattr(loginput, "STREAM_LIMIT", 8 << 20)
    w = loginput.read_window(io.BufferedReader(_Endless()))
    assert w.total == 8 << 20 and not w.complete
    assert len(w.head) <= loginput.HEAD_BYTES and len(w.tail) <= loginput.TAIL_BYTES
    assert w.skipped > 0


def test_a_stream_shorter_than_the_window_is_read_whole():
    data = b"".join(b"line %d\n" % i for i in range(100_000))  # ~0.7 MiB: more than the head
    w = loginput.read_window(io.BytesIO(data))
    assert w.skipped == 0 and w.complete and w.head + w.tail == data


def test_gzip_is_a_stream(tmp_path, capsys):
    log = tmp_path / "x.log.gz"
    with gzip.open(log, "wb") as f:
        f.write(b"INFO start\nRuntimeError: CUDA error: out of memory\n")
    assert _main(str(log), "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "oom" and out["input"]["complete"] is True
