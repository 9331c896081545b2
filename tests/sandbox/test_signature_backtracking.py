"""Every pattern of ``probe/data/signatures.json`` (signatures, exception rules, cause words, the
error-line markers, phase markers) over long adversarial lines (:mod:`tests.sandbox.adversarial`):
each search ends in time linear in the line, never in the backtracking that made one 16 KB line cost
18 s and a 163 KB log past 150 s (``cutlass\\S* ?\\S*`` split a token every way, ``A.*B.*C`` was
started again at every ``A``).

The searches run in a child process killed at a generous timeout, so a pattern that backtracks makes
this test fail naming it, never hang; each line's search must end within a generous bound too (a
linear pattern takes milliseconds on these lines, a quadratic one seconds on the 64 KB ones).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: a search of one adversarial line may take this long at most (linear patterns: ~1-80 ms)
PER_LINE_S = 2.0

_CHILD = """
import sys, time
from tests.sandbox.test_signature_backtracking import compiled_patterns
from tests.sandbox.adversarial import adversarial_lines
length = int(sys.argv[1])
for name, pat in compiled_patterns():
    print("start", name, flush=True)
    worst = 0.0
    for line in adversarial_lines(pat.pattern, length):
        t0 = time.perf_counter()
        pat.search(line)
        worst = max(worst, time.perf_counter() - t0)
    print("done", name, worst, flush=True)
"""


def compiled_patterns() -> list[tuple[str, re.Pattern[str]]]:
    """Every pattern the classifier searches lines with, compiled as it compiles them."""
    from probe.catalog.signatures import signature_db

    db = signature_db()
    out: list[tuple[str, re.Pattern[str] | None]] = [(f"signature {s.id}", s.pattern) for s in db.signatures]
    for r in db.exceptions:
        out += [
            (f"exception {r.id} type", r.type_pattern),
            (f"exception {r.id} message", r.message_pattern),
            (f"exception {r.id} frame", r.frame_pattern),
        ]
    out += [(f"cause words {w.id}", w.pattern) for w in db.cause_words]
    out += [("error-line marker", db.error_line.marker_pattern)]
    out += [("error-line not_marker", db.error_line.not_marker_pattern)]
    out += [(f"phase {p.phase} {i}", p.pattern) for i, p in enumerate(db.phases)]
    return [(name, p) for name, p in out if p is not None]


def _run(length: int, timeout: float) -> dict[str, float]:
    try:
        r = subprocess.run(
            [sys.executable, "-c", _CHILD, str(length)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        started = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("start ")]
        pytest.fail(f"no answer within {timeout} s: {started[-1] if started else '?'} backtracks")
    assert r.returncode == 0, r.stderr[-2000:]
    times = {}
    for line in r.stdout.splitlines():
        if line.startswith("done "):
            name, secs = line[5:].rsplit(" ", 1)
            times[name] = float(secs)
    return times


def test_every_pattern_is_checked():
    names = [n for n, _ in compiled_patterns()]
    assert len(names) == len(set(names)) and len(names) > 150
    assert any(n.startswith("exception ") for n in names) and any(n.startswith("phase ") for n in names)


def test_the_lines_are_adversarial():
    """The generator reproduces what made the old ``cutlass-init`` pattern cubic: a near match of
    the pattern repeated (checked on the old pattern, at a length it still answers quickly)."""
    from tests.sandbox.adversarial import adversarial_lines

    old = re.compile(r"cutlass\S* ?\S*\.?(?:initialize|can_implement)\(?\)? (?:failed|returned)", re.I)
    lines = adversarial_lines(old.pattern, 200)
    assert any(line.count("cutlass") > 10 and " " not in line for line in lines)
    assert all(len(line) == 200 for line in lines)


@pytest.mark.parametrize("length", [4096])
def test_patterns_end_in_time_on_long_lines(length):
    """4 KB lines: a pattern that backtracks exponentially or cubically takes seconds to minutes."""
    times = _run(length, timeout=240)
    assert len(times) == len(compiled_patterns())
    slow = {n: round(t, 2) for n, t in times.items() if t > PER_LINE_S}
    assert not slow, f"patterns that backtrack on {length}-character lines: {slow}"


@pytest.mark.slow
def test_patterns_end_in_time_on_64k_lines():
    """64 KB lines (four times the classifier's per-line cut): a quadratic pattern takes seconds."""
    times = _run(65536, timeout=900)
    slow = {n: round(t, 2) for n, t in times.items() if t > PER_LINE_S}
    assert not slow, f"patterns that backtrack on 64 KB lines: {slow}"
