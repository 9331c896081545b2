"""Where a hung cell was stuck: the Python stacks its worker dumps (``faulthandler`` on SIGUSR1) just
before the runner kills it, parsed back out of the captured output.

The worker registers ``faulthandler.register(SIGUSR1, all_threads=True)``; on a timeout the runner
sends SIGUSR1, drains the dump, then kills the tree. A thread blocked in native code (a GPU kernel that
never finishes, ``cudaDeviceSynchronize``, a NCCL call, a lock) still shows its Python frames.
"""

from __future__ import annotations

import re

_HEADER = re.compile(
    r"^(?:Current thread|Thread) 0x[0-9a-f]+ (?:\[[^\]]*\] )?\(most recent call first\):\s*$"
)
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)\s*$')
DUMP_MARKER = "(most recent call first):"
_CELL_FRAME = "_run_cell"  # probe.sandbox.worker_child runs each cell under this function
MAX_FRAMES = 40


def thread_dumps(text: str) -> list[list[str]]:
    """Every thread block of the LAST faulthandler dump in ``text``: frame lines, innermost first."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if _HEADER.match(ln)]
    if not starts:
        return []
    # the last dump: consecutive thread blocks separated only by blank lines
    first = starts[-1]
    for i in reversed(starts[:-1]):
        between = lines[i + 1 : first]
        if all(_FRAME.match(ln) or not ln.strip() for ln in between):
            first = i
        else:
            break
    blocks: list[list[str]] = []
    for ln in lines[first:]:
        if _HEADER.match(ln):
            blocks.append([])
        elif _FRAME.match(ln) and blocks:
            blocks[-1].append(ln.strip())
        elif ln.strip() and blocks and blocks[-1]:
            break  # the dump ended: other output follows
    return [b for b in blocks if b]


def cell_stack(text: str) -> list[str] | None:
    """The frames (innermost first) of the thread that was running the cell, else of the first thread."""
    blocks = thread_dumps(text)
    if not blocks:
        return None
    for b in blocks:
        if any(f" in {_CELL_FRAME}" in f for f in b):
            return b[:MAX_FRAMES]
    return blocks[0][:MAX_FRAMES]


def stuck_at(frames: list[str]) -> str:
    """A one-line 'file:line in func' of the innermost frame."""
    m = _FRAME.match("  " + frames[0])
    if not m:
        return frames[0]
    return f"{m['file']}:{m['line']} in {m['func']}"
