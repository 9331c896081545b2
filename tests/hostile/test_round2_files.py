"""Second round, files a user names: outputs (``-o`` / ``--junit`` / ``--summary`` onto a FIFO or a device,
``report add -o`` into a missing folder), special files and deep JSON where a file is read (the log of
``report add``, ``--estimates``, ``--plan-file``, ``--reuse``), matrices shaped to hurt the cell reader,
a model config of 10^9 layers, bad numbers a gate must not pass, logs that made the classifier
backtrack, and text from inputs that must not drive the terminal. Whole processes, under the address
cap (:mod:`tests.hostile.harness`).
"""

from __future__ import annotations

import gzip
import json
import os
import stat
from pathlib import Path

import pytest

from tests.hostile.harness import run_probe
from tests.hostile.inputs import MATRIX, deep_json, deflated_zeros
from tests.hostile.inputs2 import (
    base_matrix,
    matrix_changing_indent,
    matrix_of_cells,
    matrix_with_huge_string,
)

CONTROLS = "\x1b\x07\x9b\x85\u202e\u2066"
EVIL = "x\x1b[2J\x1b]0;pwned\x07\x9b31m\u202egnp.exe\u2066"
GATE = ["gate", "--baseline", str(MATRIX), "--current", str(MATRIX)]


def _no_controls(text: str) -> None:
    found = sorted({f"U+{ord(c):04X}" for c in text if c in CONTROLS})
    assert not found, f"terminal controls reached the output: {found}"


def _char_device(path: Path) -> Path | None:
    """A private character device node (/dev/null's numbers), or None when this user cannot make one."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        return None
    return path


# ------------------------------------------------------------------ outputs


@pytest.mark.slow
def test_outputs_onto_a_fifo_or_a_device_are_refused(tmp_path):
    """``-o`` / ``--junit`` / ``--summary`` naming a FIFO or a device: exit 2 naming the flag, the node
    left as it was (before: replaced by a regular file, or a write waiting for a reader forever)."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    targets = [fifo]
    dev = _char_device(tmp_path / "null")
    if dev is not None:
        targets.append(dev)
    for target in targets:
        mode = target.stat().st_mode
        cases = [
            (["scan", "--no-cache", str(Path(__file__)), "-o", str(target)], "-o"),
            (["show", str(MATRIX), "-o", str(target)], "-o"),
            (["show", str(MATRIX), "--format", "html", "-o", str(target)], "-o"),
            (["merge", str(MATRIX), "-o", str(target)], "-o"),
            ([*GATE, "--junit", str(target)], "--junit"),
            ([*GATE, "--summary", str(target)], "--summary"),
        ]
        for args, flag in cases:
            r = run_probe(*args, timeout=30)
            r.check(2, seconds=30)
            assert flag in r.err and "not a regular file" in r.err, (args, r.err)
            assert target.stat().st_mode == mode, f"{args} replaced {target}"


def _report_add(log: Path, out: Path, *source: str) -> list[str]:
    """``probe report add LOG`` for a marlin failure on sm_90 into ``out`` (``source``: citation or URL)."""
    cited = source or ("--citation", "CI")
    return ["report", "add", str(log), "--gpu", "sm_90", "--backend", "marlin", *cited, "-o", str(out)]


def test_report_add_into_a_missing_folder_is_a_usage_error(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("RuntimeError: CUDA error: out of memory\n")
    out = tmp_path / "no" / "such" / "reports.json"
    r = run_probe(*_report_add(log, out), timeout=60)
    r.check(2, seconds=60)
    assert "does not exist" in r.err and not (tmp_path / "no").exists()


# ------------------------------------------------------------------ special files where a file is read


def _read_args(what: str, path: Path, tmp: Path) -> list[str]:
    dry = ["run", "--models", "122b", "--budget", "15m", "--dry-run"]
    return {
        "report-log": _report_add(path, tmp / "r.json"),
        "estimates": [*dry, "--estimates", str(path)],
        "plan-file": [*dry, "--plan-file", str(path)],
        "reuse": [*dry, "--reuse", str(path)],
        "reports": ["reports", "--reports", str(path)],
    }[what]


WHATS = ["report-log", "estimates", "plan-file", "reuse", "reports"]


@pytest.mark.slow
@pytest.mark.parametrize("what", WHATS)
def test_special_files_where_a_file_is_read(tmp_path, what):
    """A FIFO (before: blocked forever) and /dev/zero (before: read until memory ran out): exit 6 at
    once, naming what it is."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device")):
        r = run_probe(*_read_args(what, path, tmp_path), timeout=30)
        r.check(6, seconds=30)
        assert kind in r.err and str(path) in r.err, r.err


@pytest.mark.slow
@pytest.mark.parametrize("what", ["estimates", "plan-file", "reuse", "reports"])
def test_json_nested_100k_deep_where_a_file_is_read(tmp_path, what):
    """Before: internal error RecursionError (exit 4)."""
    path = tmp_path / "deep.json"
    path.write_text(deep_json(100_000))
    r = run_probe(*_read_args(what, path, tmp_path), timeout=30)
    r.check(6, seconds=30)
    assert "nested more than 200 levels deep" in r.err, r.err


# ------------------------------------------------------------------ matrices


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["huge-string", "million-cells", "gz-bomb", "changing-indent"])
def test_matrices_shaped_to_hurt_the_reader(tmp_path, shape):
    """One 300 MB string, a million cells, a .json.gz inflating to 1 GiB (before: past 512 MB each);
    indentation that changes after the first cell (before: the rest of the file searched per cell)."""
    if shape == "huge-string":
        path, rc, why = matrix_with_huge_string(tmp_path / "m.json", 300), 6, "larger than 32 MiB"
    elif shape == "million-cells":
        path, rc, why = matrix_of_cells(tmp_path / "m.json", 1_000_000), 6, "more than 120,000 cells"
    elif shape == "gz-bomb":
        path, rc, why = tmp_path / "m.json.gz", 6, "inflates past 256 MiB"
        path.write_bytes(deflated_zeros(b"{", 1 << 30, 31)[0])
    else:
        path, rc, why = matrix_changing_indent(tmp_path / "m.json", 40_000), 0, ""
    r = run_probe("show", str(path), timeout=120)
    r.check(rc, seconds=120)
    assert why in r.err


@pytest.mark.slow
@pytest.mark.parametrize("value", ["NaN", "-24.0", "Infinity"])
def test_gate_refuses_a_speed_that_is_not_a_number(tmp_path, value):
    """An engine cell whose tokens_per_s is NaN or negative (before: the gate passed it)."""
    text = MATRIX.read_text().replace('"tokens_per_s": 24.0', f'"tokens_per_s": {value}')
    assert text != MATRIX.read_text()
    cur = tmp_path / "cur.json"
    cur.write_text(text)
    r = run_probe("gate", "--baseline", str(MATRIX), "--current", str(cur), timeout=60)
    r.check(6, seconds=60)
    assert "timings.tokens_per_s" in r.err and "finite number >= 0" in r.err


@pytest.mark.slow
def test_model_config_of_a_billion_layers(tmp_path):
    """Before: internal error MemoryError."""
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 10**9,
                "hidden_size": 4096,
                "num_attention_heads": 32,
            }
        )
    )
    r = run_probe("models", str(cfg), "--layers", timeout=60)
    r.check(2, seconds=60)
    assert "num_hidden_layers" in r.err and "more than the 100,000 layers read" in r.err


# ------------------------------------------------------------------ the classifier


@pytest.mark.slow
def test_logs_that_made_the_patterns_backtrack(tmp_path):
    """A 16 KB line and a 163 KB log of near matches (before: 76 s for the line, minutes for the log)."""
    unit = "NCCL error: cuMemAlloc failed cicc nvcc ptxas triton CalledProcessError: Command gcc "
    line = (unit * (16384 // len(unit) + 1))[:16000]
    one = tmp_path / "line.log"
    one.write_text(line + "\n")
    many = tmp_path / "log.log"
    xid = ("NVRM: GSP " * 1700)[:16300]
    many.write_text("".join((line if i % 2 else xid) + "\n" for i in range(10)))
    for p in (one, many):
        r = run_probe("classify", str(p), timeout=60)
        r.check(0, seconds=60)


# ------------------------------------------------------------------ what reaches the terminal


def _evil_matrix(tmp: Path) -> Path:
    doc = base_matrix()
    doc["provenance"]["image"] = EVIL
    doc["provenance"]["host"] = EVIL
    doc["provenance"]["versions"]["vllm"] = EVIL
    p = tmp / "evil.json"
    p.write_text(json.dumps(doc, indent=1))
    return p


def test_matrix_provenance_reaches_the_terminal_escaped(tmp_path):
    evil = _evil_matrix(tmp_path)
    runs = [
        run_probe("show", str(evil), timeout=60),
        run_probe("show", str(evil), "--format", "md", timeout=60),
        run_probe("diff", str(MATRIX), str(evil), timeout=60),
        run_probe("gate", "--baseline", str(MATRIX), "--current", str(evil), timeout=60),
        run_probe("merge", str(evil), str(MATRIX), "-o", str(tmp_path / "f.json"), timeout=60),
    ]
    for r in runs:
        assert r.rc in (0, 1) and "Traceback" not in r.err, r.err[-1000:]
        _no_controls(r.out + r.err)
    assert "\\u001b" in runs[0].out + runs[2].out + runs[4].out


def test_classified_root_cause_and_report_url_reach_the_terminal_escaped(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(f"RuntimeError: CUDA error: out of memory {EVIL}\n")
    r = run_probe("classify", str(log), timeout=60)
    r.check(0, seconds=60)
    _no_controls(r.out + r.err)
    out = tmp_path / "r.json"
    r = run_probe(*_report_add(log, out, "--url", f"https://example.com/{EVIL}"), timeout=60)
    _no_controls(r.out + r.err)
    if r.rc == 0:
        r = run_probe("reports", "--reports", str(out), "--gpu", "sm_90", timeout=60)
        _no_controls(r.out + r.err)


def test_the_sanitiser_keeps_json_the_same_document():
    from probe.textsafe import clean

    doc = {"path": EVIL, "n": 1}
    text = json.dumps(doc, ensure_ascii=False)
    assert json.loads(clean(text)) == doc
    _no_controls(clean(text))
    assert clean("plain ascii\tand\nlines") == "plain ascii\tand\nlines"


def test_gz_report_log_read_through_the_bounded_reader(tmp_path):
    log = tmp_path / "engine.log.gz"
    log.write_bytes(gzip.compress(b"RuntimeError: CUDA error: out of memory\n"))
    r = run_probe(*_report_add(log, tmp_path / "r.json"), timeout=60)
    r.check(0, seconds=60)


# ------------------------------------------------------------------ our own round, beyond the issue's


@pytest.mark.slow
def test_journal_fifo_gz_bomb_and_index_with_a_fifo(tmp_path):
    """``reports --from-run`` naming a FIFO (before: blocked) or a journal.gz bomb (before: inflated
    whole in memory); ``show --index`` over a folder holding a FIFO named like a matrix (before: blocked)."""
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    bomb = tmp_path / "run.jsonl.gz"
    bomb.write_bytes(deflated_zeros(b"", 2 << 30, 31)[0])
    for path, why in ((fifo, "a FIFO"), (bomb, "inflates past 256 MiB")):
        r = run_probe("reports", "--from-run", str(path), "--gpu", "sm_90", timeout=60)
        r.check(6, seconds=60)
        assert why in r.err, r.err
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "m.json").write_text(MATRIX.read_text())
    os.mkfifo(tmp_path / "idx" / "f.json")
    r = run_probe("show", "--index", str(tmp_path / "idx"), timeout=60)
    r.check(0, seconds=60)
    assert "f.json | unreadable" in r.out


@pytest.mark.slow
def test_compact_matrix_of_100k_cells(tmp_path):
    """A matrix written without newlines: each cell's indentation was looked for back to the start of the
    4 MiB window (before: 27 s for 100,000 cells; now a few seconds)."""
    from tests.hostile.inputs import matrix_doc

    path = tmp_path / "compact.json"
    path.write_text(json.dumps(matrix_doc(100_000)))
    r = run_probe("show", str(path), timeout=120)
    r.check(0, seconds=120)


def test_a_fifo_as_the_journal_of_a_run_is_refused(tmp_path):
    from probe.errors import ProbeError
    from probe.sandbox.journal import Journal

    fifo = tmp_path / "j.jsonl"
    os.mkfifo(fifo)
    for resume in (False, True):  # (before: the open for writing waited for a reader forever)
        with pytest.raises(ProbeError, match="a FIFO, not a regular file"):
            Journal.open(fifo, resume=resume)
