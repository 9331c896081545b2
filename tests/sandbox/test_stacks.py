"""Parsing faulthandler dumps back out of a hung cell's output."""

from __future__ import annotations

from probe.sandbox import stacks

DUMP = """\
INFO some vLLM line
Thread 0x00007f3c1d7fe6c0 [probe-parent-wa] (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 359 in wait
  File "/tmp/site/probe/sandbox/worker_child.py", line 80 in _watch_parent

Current thread 0x00007f3c2a1b7740 (most recent call first):
  File "/tmp/site/torch/cuda/__init__.py", line 1083 in synchronize
  File "/repo/probe/probes/attention_layer.py", line 171 in step
  File "/repo/probe/sandbox/worker_child.py", line 167 in _run_cell
  File "/repo/probe/sandbox/worker_child.py", line 235 in main

[... later output ...]
"""


def test_cell_thread_is_found_among_all_threads() -> None:
    frames = stacks.cell_stack(DUMP)
    assert frames is not None and frames[0].endswith("line 1083 in synchronize")
    assert stacks.stuck_at(frames) == "/tmp/site/torch/cuda/__init__.py:1083 in synchronize"
    assert len(stacks.thread_dumps(DUMP)) == 2


def test_only_the_last_dump_counts() -> None:
    older = 'Current thread 0x0000000000000001 (most recent call first):\n  File "a.py", line 1 in old\n'
    text = older + "other output in between\n" + DUMP
    assert stacks.cell_stack(text)[0].endswith("in synchronize")


def test_no_dump() -> None:
    assert stacks.cell_stack('Traceback (most recent call last):\n  File "x.py", line 3, in f\n') is None
    assert stacks.thread_dumps("") == []
