"""The sandboxed child: ``python -m probe.sandbox.worker_child --cmd-fd N --evt-fd M``.

It reads cell specs as JSON lines from the command pipe and runs them one after the other in this
interpreter (a *warm* worker: torch / vLLM are imported once, by the first cell that needs them).
Everything it tells the parent goes through the event pipe, never through stdout/stderr, so an
output flood cannot hide a phase marker or a result:

    {"ev": "ready", "pid": 123}
    {"ev": "start", "id": "<cell id>"}
    {"ev": "phase", "id": "<cell id>", "name": "forward"}
    {"ev": "note",  "id": "<cell id>", "key": "kernel", "value": "..."}
    {"ev": "done",  "id": "<cell id>", "result": {...}}            # the probe returned
    {"ev": "done",  "id": "<cell id>", "error": {"type", "message"}}  # the probe raised

A probe target is ``"package.module:function"`` called as ``function(params, ctx)`` and returns a
dict (see docs/sandbox.md for the keys the runner understands). A raised exception has its
traceback printed to stderr (the parent's classifier reads it).

This module must stay import-light: it is the first thing every sandboxed interpreter runs.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import importlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

TOKEN_VAR = "PROBE_CELL_TOKEN"


class ChildContext:
    """The ``ctx`` handed to a probe function (implements ``probe.cells.ProbeContext``)."""

    def __init__(self, channel: _Channel, cell_id: str, limits: dict[str, Any], worker: str) -> None:
        self._channel = channel
        self.cell_id = cell_id
        self.worker = worker  # "warm" or "isolated"
        self.limits = dict(limits)
        #: fraction of device memory the probe may hand to vLLM (None: no cap decided by the runner)
        self.gpu_memory_utilization: float | None = limits.get("gpu_memory_utilization")
        #: memory (GiB) the runner reserved for this cell (None: unknown)
        self.mem_share_gib: float | None = limits.get("mem_share_gib")
        self.notes: dict[str, Any] = {}
        self.current_phase: str | None = None

    def phase(self, name: str) -> None:
        self.current_phase = str(name)
        self._channel.send({"ev": "phase", "id": self.cell_id, "name": self.current_phase})

    def note(self, key: str, value: Any) -> None:
        self.notes[str(key)] = value
        self._channel.send({"ev": "note", "id": self.cell_id, "key": str(key), "value": value})


class _Channel:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg, default=repr, separators=(",", ":")) + "\n").encode()
        with self.lock:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)


def _watch_parent(parent: int, token: str) -> None:
    """If the prober dies (even by kill -9), take this worker's whole tree down with it."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            with contextlib.suppress(Exception):
                from probe.sandbox.procs import kill_strays

                kill_strays(token, prefix=True, exclude=(os.getpid(),))
            with contextlib.suppress(Exception):
                os.killpg(os.getpgrp(), signal.SIGKILL)
            os._exit(137)


def _load(target: str) -> Any:
    module_name, _, func_name = target.partition(":")
    if not module_name or not func_name:
        raise ValueError(f"cell target must be 'package.module:function', got {target!r}")
    func: Any = importlib.import_module(module_name)
    for part in func_name.split("."):
        func = getattr(func, part)
    if not callable(func):
        raise TypeError(f"cell target {target!r} is not callable")
    return func


def _innermost_frame(exc: BaseException) -> dict[str, Any]:
    """Where the exception was raised (the traceback's innermost frame), for probe-bug attribution;
    ``import_error`` is set for ImportError (a missing / renamed backend module is not a probe bug),
    ``stack_failure`` (with the failure's details) for :class:`probe.outcomes.StackFailure`."""
    from probe.outcomes import StackFailure

    try:
        frames = traceback.extract_tb(exc.__traceback__)
    except Exception:  # a broken traceback must not lose the error report
        return {}
    if not frames:
        return {}
    last = frames[-1]
    out: dict[str, Any] = {"frame": {"file": last.filename, "line": last.lineno, "function": last.name}}
    if isinstance(exc, ImportError):
        out["import_error"] = True
    if isinstance(exc, StackFailure):
        out["stack_failure"] = True
        out["details"] = exc.details
    return out


def _gpu_settle(reset_only: bool = False) -> float | None:
    """Hand back what a cell left in torch's CUDA cache; return the cell's peak allocated GiB.

    A warm worker would otherwise keep the cache of its biggest cell reserved, and under ``-j N`` the
    other workers' cells would see that much less free memory than the budget promised them. Does
    nothing unless the cell itself imported torch and initialised CUDA.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return None
        peak = None if reset_only else round(cuda.max_memory_allocated() / 2**30, 2)
        if not reset_only:
            gc.collect()
            cuda.empty_cache()
        cuda.reset_peak_memory_stats()
        return peak
    except Exception:  # a broken CUDA context: the cell's own result says more
        return None


def _run_cell(channel: _Channel, msg: dict[str, Any], worker_kind: str) -> None:
    spec = msg["spec"]
    cell_id = spec["id"]
    saved = dict(os.environ)
    os.environ[TOKEN_VAR] = msg["token"]
    for key, value in (msg.get("env") or {}).items():
        os.environ[key] = value
    channel.send({"ev": "start", "id": cell_id, "t": time.time()})
    ctx = ChildContext(channel, cell_id, msg.get("limits") or {}, worker_kind)
    _gpu_settle(reset_only=True)
    try:
        ctx.phase("load_target")
        func = _load(spec["target"])
        ctx.phase("run")
        result = func(msg.get("params", spec.get("params", {})), ctx)
        if result is None:
            result = {}
        if not isinstance(result, dict):
            raise TypeError(f"probe {spec['target']} returned {type(result).__name__}, expected dict")
        peak = _gpu_settle()
        if peak is not None:
            details = result.setdefault("details", {})
            if isinstance(details, dict):
                details.setdefault("gpu_peak_gib", peak)
        _flush_all()
        channel.send({"ev": "done", "id": cell_id, "result": result, "phase": ctx.current_phase})
    except BaseException as exc:
        with contextlib.suppress(Exception):
            traceback.print_exc(file=sys.stderr)
        error = {
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
            "message": str(exc)[:2000],
            **_innermost_frame(exc),
        }
        with contextlib.suppress(Exception):  # the frames hold the failed cell's tensors
            traceback.clear_frames(exc.__traceback__)
        _gpu_settle()
        _flush_all()
        channel.send({"ev": "done", "id": cell_id, "phase": ctx.current_phase, "error": error})
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="probe.sandbox.worker_child")
    ap.add_argument("--cmd-fd", type=int, required=True)
    ap.add_argument("--evt-fd", type=int, required=True)
    ap.add_argument("--kind", choices=("warm", "isolated"), default="warm")
    ap.add_argument("--parent", type=int, default=0)
    args = ap.parse_args(argv)
    # Descendants must not hold our private pipes open (EOF is how the parent sees us die).
    os.set_inheritable(args.cmd_fd, False)
    os.set_inheritable(args.evt_fd, False)
    channel = _Channel(args.evt_fd)
    # a cell that hangs: the runner asks for every thread's Python stack before it kills us
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    token = os.environ.get(TOKEN_VAR, "")
    if args.parent:
        threading.Thread(
            target=_watch_parent, args=(args.parent, token), daemon=True, name="probe-parent-watch"
        ).start()
    channel.send({"ev": "ready", "pid": os.getpid()})
    with os.fdopen(args.cmd_fd, "rb", buffering=0) as raw:
        reader = raw  # unbuffered: read exactly what the parent wrote
        buf = b""
        while True:
            chunk = reader.read(65536)
            if not chunk:
                return 0
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                msg = json.loads(line)
                if msg.get("op") == "exit":
                    _flush_all()
                    return 0
                if msg.get("op") == "run":
                    _run_cell(channel, msg, args.kind)


if __name__ == "__main__":
    sys.exit(main())
