"""Run probe cells in sandboxed children: warm workers, per-cell timeouts, crash containment.

Model (after pytest-xdist): a *warm* worker (``python -m probe.sandbox.worker``) imports probe
targets once and runs cells in sequence, receiving specs and sending results as JSON lines over
private pipes. The parent enforces each cell's timeout, samples the child tree's RSS, and captures
stdout+stderr (one stream, so the order of lines is kept) into bounded head+tail buffers. If the
worker dies or hangs mid-cell, *that* cell is recorded from what the parent knows (last phase,
output since the cell started, exit status → classifier) and the remaining cells go to a fresh
worker. Cells with ``isolate=True`` always get a fresh child; cells are grouped by ``env`` so a
warm worker is reused for every cell of the same environment.

Every child runs in its own session (``start_new_session=True``): a timeout sends SIGTERM to the
whole group, waits a grace period, then SIGKILL; descendants that left the group (``setsid``) are
found by the ``PROBE_CELL_TOKEN`` in their environment and killed too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from probe.cells import CellResult, CellSpec
from probe.errors import UsageError
from probe.outcomes import Outcome
from probe.sandbox import gpulock, procs
from probe.sandbox.capture import DEFAULT_HEAD, DEFAULT_TAIL, HeadTail
from probe.sandbox.memory import GIB, MemoryPolicy, read_meminfo

log = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20
_MAX_EVT_LINE = 64 << 20
_PKG_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class RunnerConfig:
    """Knobs of the runner. Defaults suit ``probe run``."""

    jobs: int = 1
    grace_s: float = 5.0
    timeout_override_s: float | None = None
    isolate_all: bool = False
    max_restarts: int = 16
    confirm_crashes: bool = False
    head_bytes: int = DEFAULT_HEAD
    tail_bytes: int = DEFAULT_TAIL
    sample_interval_s: float = 0.1
    python: str = sys.executable
    base_env: dict[str, str] | None = None
    memory: MemoryPolicy = field(default_factory=MemoryPolicy)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    excerpt_chars: int = 6000
    #: kill a cell (→ ``oom``) whose child tree RSS exceeds this many bytes (None: no cap)
    rss_cap_bytes: int | None = None
    #: directory of the cross-process GPU timing lock (``probe.sandbox.gpulock``); ``run_cells``
    #: makes a private one when ``jobs`` > 1 and none is given
    gpu_lock_dir: str | None = None


@dataclass
class RunReport:
    results: list[CellResult] = field(default_factory=list)
    already_done: list[str] = field(default_factory=list)
    not_run: dict[str, str] = field(default_factory=dict)
    worker_restarts: int = 0
    interrupted: bool = False


@dataclass
class _Raw:
    """What the parent observed while one cell ran."""

    capture: HeadTail
    phase: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    done: dict[str, Any] | None = None
    timed_out: bool = False
    died: bool = False
    exit_code: int | None = None
    signal: str | None = None
    peak_rss: int = 0
    wall_s: float = 0.0
    mem_kill: str | None = None
    strays_killed: list[int] = field(default_factory=list)
    started_at: str = ""
    stopped: bool = False


def env_key(spec: CellSpec) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(spec.env.items()))


class WorkerProc:
    """One sandboxed worker process (warm: many cells; isolated: one cell, then it exits)."""

    def __init__(self, cfg: RunnerConfig, env: dict[str, str], kind: str) -> None:
        self.cfg = cfg
        self.kind = kind
        self.token = f"{cfg.run_id}-{uuid.uuid4().hex[:10]}"
        self.cells_run = 0
        self.ready = False
        self.dead = False
        self.exit_code: int | None = None
        self.rusage_maxrss: int = 0
        self._evt_buf = b""
        self._stop = threading.Event()
        base = dict(cfg.base_env if cfg.base_env is not None else os.environ)
        base.update(env)
        base[procs.TOKEN_VAR] = self.token
        base[procs.RUN_VAR] = cfg.run_id
        if cfg.gpu_lock_dir:
            base[gpulock.ENV_VAR] = cfg.gpu_lock_dir
        base.setdefault("PYTHONUNBUFFERED", "1")
        base.setdefault("PYTHONFAULTHANDLER", "1")
        pp = base.get("PYTHONPATH", "")
        if _PKG_ROOT not in pp.split(os.pathsep):
            base["PYTHONPATH"] = _PKG_ROOT + (os.pathsep + pp if pp else "")
        cmd_r, cmd_w = os.pipe()
        evt_r, evt_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [
                    cfg.python,
                    "-m",
                    "probe.sandbox.worker",
                    "--cmd-fd",
                    str(cmd_r),
                    "--evt-fd",
                    str(evt_w),
                    "--kind",
                    kind,
                    "--parent",
                    str(os.getpid()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=out_w,
                pass_fds=(cmd_r, evt_w),
                start_new_session=True,
                env=base,
                close_fds=True,
            )
        except BaseException:
            for fd in (cmd_r, cmd_w, evt_r, evt_w, out_r, out_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise
        for fd in (cmd_r, evt_w, out_w):
            os.close(fd)
        self.pid = self.proc.pid
        self.pgid = self.pid
        self.cmd_w = cmd_w
        self.evt_r = evt_r
        self.out_r = out_r
        os.set_blocking(evt_r, False)
        os.set_blocking(out_r, False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(evt_r, selectors.EVENT_READ, "evt")
        self.sel.register(out_r, selectors.EVENT_READ, "out")
        self._pending_events: list[dict[str, Any]] = []
        self._out_open = True
        self._evt_open = True
        self._discard = HeadTail(4096, 4096)  # output between cells

    # -- low level -------------------------------------------------------------------------------
    def _send(self, msg: dict[str, Any]) -> bool:
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.cmd_w, view)
                view = view[n:]
            return True
        except (BrokenPipeError, OSError):
            return False

    def _reap(self, block: bool = False) -> bool:
        """Collect the worker's exit status if it has exited. True once it is reaped."""
        if self.proc.returncode is not None:
            return True
        try:
            pid, status, ru = os.wait4(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.proc.returncode = self.proc.returncode if self.proc.returncode is not None else -1
            return True
        if pid == 0:
            return False
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.exit_code = self.proc.returncode
        self.rusage_maxrss = ru.ru_maxrss * 1024
        return True

    def _read_out(self, sink: HeadTail, budget: int = 64 << 20) -> None:
        got = 0
        while self._out_open and got < budget:
            try:
                chunk = os.read(self.out_r, _READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._out_open = False
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(self.out_r)
                return
            sink.feed(chunk)
            got += len(chunk)

    def _read_evt(self) -> None:
        while self._evt_open:
            try:
                chunk = os.read(self.evt_r, _READ_CHUNK)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self._evt_open = False
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(self.evt_r)
                break
            self._evt_buf += chunk
            if len(self._evt_buf) > _MAX_EVT_LINE and b"\n" not in self._evt_buf:
                log.warning("worker %d sent an oversized event line; dropped", self.pid)
                self._evt_buf = b""
        while b"\n" in self._evt_buf:
            line, self._evt_buf = self._evt_buf.split(b"\n", 1)
            try:
                self._pending_events.append(json.loads(line))
            except json.JSONDecodeError:
                log.warning("worker %d sent a malformed event line", self.pid)

    def _tree_pids(self) -> list[int]:
        return procs.members(sid=self.pid, pgid=self.pgid)

    # -- one cell --------------------------------------------------------------------------------
    def run_cell(
        self,
        spec: CellSpec,
        params: dict[str, Any],
        limits: dict[str, float],
        timeout_s: float,
        stop: threading.Event | None = None,
    ) -> _Raw:
        cfg = self.cfg
        self.cells_run += 1
        cell_token = f"{self.token}/{self.cells_run}"
        raw = _Raw(
            capture=HeadTail(cfg.head_bytes, cfg.tail_bytes),
            phase=None if self.ready else "startup",
            started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        child_env = {}
        if "gpu_memory_utilization" in limits:
            child_env["PROBE_GPU_MEMORY_UTILIZATION"] = str(limits["gpu_memory_utilization"])
        msg = {
            "op": "run",
            "spec": spec.model_dump(mode="json"),
            "params": params,
            "token": cell_token,
            "env": child_env,
            "limits": {k: v for k, v in limits.items() if k in ("gpu_memory_utilization", "mem_share_gib")},
        }
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        sent = self._send(msg)
        if sent and self.kind == "isolated":
            self._send({"op": "exit"})
        rss_cap = limits.get("rss_cap_bytes")
        host_critical = limits.get("host_critical_bytes")
        next_sample = 0.0
        while True:
            now = time.monotonic()
            if now >= next_sample:
                next_sample = now + cfg.sample_interval_s
                tree = self._tree_pids()
                rss = procs.rss_bytes(tree)
                raw.peak_rss = max(raw.peak_rss, rss)
                if rss_cap and rss > rss_cap:
                    raw.mem_kill = (
                        f"probe: child tree RSS {rss / GIB:.1f} GiB exceeded its unified-memory "
                        f"share of {rss_cap / GIB:.1f} GiB; killed"
                    )
                if host_critical:
                    avail = read_meminfo().get("MemAvailable")
                    if avail is not None and avail < host_critical:
                        raw.mem_kill = (
                            f"probe: host MemAvailable fell to {avail / GIB:.1f} GiB "
                            f"(< {host_critical / GIB:.1f} GiB); killed to protect the host"
                        )
                if raw.mem_kill:
                    break
            wait = max(0.0, min(deadline - now, next_sample - now, cfg.sample_interval_s))
            for key, _ in self.sel.select(timeout=wait):
                if key.data == "out":
                    self._read_out(raw.capture)
                else:
                    self._read_evt()
            for ev in self._take_events():
                kind = ev.get("ev")
                if kind == "ready":
                    self.ready = True
                    if raw.phase == "startup":
                        raw.phase = None
                elif ev.get("id") != spec.id:
                    continue
                elif kind == "phase":
                    raw.phase = str(ev.get("name"))
                elif kind == "note":
                    raw.notes[str(ev.get("key"))] = ev.get("value")
                elif kind == "done":
                    raw.done = ev
            if raw.done is not None:
                break
            if not self._evt_open or self._reap():
                raw.died = True
                break
            if not sent:
                raw.died = True
                break
            if time.monotonic() >= deadline:
                raw.timed_out = True
                break
            if stop is not None and stop.is_set():
                raw.stopped = True
                break
        raw.wall_s = time.monotonic() - t0
        if raw.done is not None:
            self._read_out(raw.capture)  # whatever the child wrote before "done" is in the pipe now
            if self.kind == "isolated":
                self._finish_isolated(raw)
            else:
                raw.strays_killed = procs.kill_strays(cell_token, exclude=(self.pid,))
                if raw.strays_killed:
                    log.info("cell %s left %d process(es) behind; killed", spec.id, len(raw.strays_killed))
        else:
            self._kill(raw, term_first=not raw.died)
        raw.peak_rss = max(raw.peak_rss, self.rusage_maxrss if self.kind == "isolated" else 0)
        return raw

    def _take_events(self) -> list[dict[str, Any]]:
        evs, self._pending_events = self._pending_events, []
        return evs

    def _finish_isolated(self, raw: _Raw) -> None:
        deadline = time.monotonic() + max(self.cfg.grace_s, 10.0)
        while time.monotonic() < deadline and not self._reap():
            self._read_out(raw.capture)
            time.sleep(0.02)
        self._kill(raw, term_first=self.proc.returncode is None)

    def _kill(self, raw: _Raw, *, term_first: bool) -> None:
        """Tear down the whole worker tree; record its exit status."""
        self.dead = True
        strays = procs.terminate_tree(
            self.pgid,
            self.token,
            grace_s=self.cfg.grace_s if term_first else 0.0,
            reap=lambda: (self._read_out(raw.capture), self._reap()),
            prefix=True,
            term_first=term_first,
        )
        raw.strays_killed = strays
        self._reap(block=True)
        self._read_out(raw.capture)
        self._close_fds()
        rc = self.proc.returncode
        raw.exit_code = rc
        if rc is not None and rc < 0:
            try:
                raw.signal = signal.Signals(-rc).name
            except ValueError:
                raw.signal = f"signal {-rc}"

    def _close_fds(self) -> None:
        with contextlib.suppress(Exception):
            self.sel.close()
        for fd in (self.cmd_w, self.evt_r, self.out_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._out_open = self._evt_open = False

    def close(self) -> None:
        """Stop a warm worker between cells (politely: ``exit`` op, then the group kill)."""
        if self.dead:
            return
        self._send({"op": "exit"})
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not self._reap():
            with contextlib.suppress(Exception):
                self._read_out(self._discard)
            time.sleep(0.02)
        self._kill(_Raw(capture=self._discard), term_first=self.proc.returncode is None)


def _as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# Folders holding probe's own cell code: an exception raised there (innermost traceback frame) is
# most likely a probe bug, not a backend failure. A module-level list so tests can add a folder.
PROBE_CODE_DIRS: list[Path] = [
    Path(__file__).resolve().parent,
    Path(__file__).resolve().parent.parent / "probes",
]


def probe_code_location(error: dict[str, Any] | None, dirs: list[Path] | None = None) -> str | None:
    """``file:line`` (relative to the probe package's parent) when ``error`` was raised in probe's own
    code (``PROBE_CODE_DIRS``), else None. ImportErrors are never attributed to probe: a missing or
    renamed backend module is what the ``import_error`` / ``api_mismatch`` outcomes report."""
    if not isinstance(error, dict) or error.get("import_error"):
        return None
    frame = error.get("frame")
    if not isinstance(frame, dict) or not frame.get("file"):
        return None
    try:
        path = Path(str(frame["file"])).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    for root in dirs if dirs is not None else PROBE_CODE_DIRS:
        root = root.resolve()
        if path == root or root in path.parents:
            base = Path(__file__).resolve().parent.parent.parent  # the folder holding the package
            try:
                shown = path.relative_to(base).as_posix()
            except ValueError:
                shown = str(path)
            return f"{shown}:{frame.get('line')}"
    return None


def build_result(spec: CellSpec, raw: _Raw, worker: str, excerpt_chars: int = 6000) -> CellResult:
    """Turn what the parent observed into a CellResult (the classifier decides the outcome)."""
    from probe.sandbox.classify import classify_text

    text = raw.capture.text()
    details: dict[str, Any] = {}
    if raw.notes:
        details["notes"] = raw.notes
    details["output_bytes"] = raw.capture.total
    if raw.strays_killed:
        details["strays_killed"] = len(raw.strays_killed)
    timings: dict[str, float] = {}
    ref_error = None
    reported: dict[str, Any] = {}
    error = None
    if raw.done is not None:
        reported = dict(raw.done.get("result") or {})
        error = raw.done.get("error")
    if error:
        line = f"{error.get('type')}: {error.get('message')}".strip()
        first = line.splitlines()[0] if line else ""
        if first and first not in text:
            text = text + ("\n" if text and not text.endswith("\n") else "") + line + "\n"
    reported_outcome = reported.pop("outcome", None)
    if reported_outcome is not None:
        try:
            reported_outcome = Outcome(reported_outcome)
        except ValueError:
            details["bad_reported_outcome"] = str(reported_outcome)
            reported_outcome = None
    if raw.done is not None and error is None and reported_outcome is None:
        reported_outcome = Outcome.OK
    verdict = classify_text(
        text,
        exit_code=raw.exit_code if raw.died or raw.timed_out or raw.mem_kill else None,
        signal_name=raw.signal if raw.died else None,
        timed_out=raw.timed_out,
        reported=reported_outcome,
        memory_killed=raw.mem_kill is not None,
        completed=raw.done is not None,
    )
    outcome = verdict.outcome
    root_cause = reported.pop("root_cause", None) or verdict.root_cause
    hint = reported.pop("hint", None) or verdict.hint
    if raw.mem_kill:
        outcome = Outcome.OOM
        root_cause = (
            verdict.root_cause if verdict.outcome is Outcome.OOM and verdict.root_cause else raw.mem_kill
        )
        hint = hint or "lower the probe's memory (gpu_memory_utilization / batch) or run with fewer -j"
    if raw.timed_out and not root_cause:
        root_cause = f"probe: no result after {raw.wall_s:.0f} s (phase {raw.phase or 'unknown'}); killed"
    if raw.died and not root_cause:
        how = f"was killed by {raw.signal}" if raw.signal else f"exited with code {raw.exit_code}"
        root_cause = f"probe: the child {how} before reporting a result (phase {raw.phase or 'unknown'})"
    degraded = bool(reported.pop("degraded", False)) or verdict.degraded
    reasons = list(reported.pop("degraded_reasons", []) or []) + [
        r for r in verdict.degraded_reasons if r not in (reported.get("degraded_reasons") or [])
    ]
    t = reported.pop("timings", None)
    if isinstance(t, dict):
        timings = {str(k): float(v) for k, v in t.items() if _as_float(v) is not None}
    ref_error = _as_float(reported.pop("ref_error", None))
    d = reported.pop("details", None)
    if isinstance(d, dict):
        details.update(d)
    phase = reported.pop("phase", None) or raw.phase or verdict.phase
    details.update(reported)  # anything else the probe returned
    if error:
        details["exception"] = error
        where = probe_code_location(error)
        if where:
            details["probe_error"] = True
            own = (
                f"raised in probe's own code ({where}): most likely a probe bug, not a backend "
                "failure — please report it"
            )
            hint = f"{own}; {hint}" if hint else own
    if raw.done is not None and raw.exit_code not in (None, 0) and worker == "isolated":
        details["exit_after_result"] = raw.exit_code
    if verdict.line_number is not None:
        details["root_cause_line"] = verdict.line_number
    excerpt = text[-excerpt_chars:] if text else None
    return CellResult(
        id=spec.id,
        kind=spec.kind,
        params=spec.params,
        outcome=outcome,
        degraded=degraded,
        degraded_reasons=list(dict.fromkeys(reasons)),
        phase=phase,
        root_cause=root_cause,
        hint=hint,
        exit_code=raw.exit_code if raw.done is None or worker == "isolated" else None,
        signal=raw.signal,
        wall_s=round(raw.wall_s, 3),
        peak_rss_mb=round(raw.peak_rss / (1 << 20), 1) if raw.peak_rss else None,
        timings=timings,
        ref_error=ref_error,
        details=details,
        log_excerpt=excerpt,
        worker=worker,
        started_at=raw.started_at,
    )


class _Scheduler:
    def __init__(
        self, specs: list[CellSpec], cfg: RunnerConfig, sink: Callable[[CellResult], None], report: RunReport
    ) -> None:
        self.cfg = cfg
        self.pending = list(specs)
        self.sink = sink
        self.report = report
        self.cond = threading.Condition()
        self.running_mem = 0.0
        self.running = 0
        self.exclusive_running = False
        self.restarts = 0
        self.stop = threading.Event()
        self.sink_lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.workers: set[WorkerProc] = set()

    # which cell next (called with the lock held)
    def _pick(self, prefer: tuple[tuple[str, str], ...] | None) -> tuple[CellSpec, dict[str, float]] | None:
        if self.exclusive_running:
            return None
        mem = self.cfg.memory
        free_slots = max(1, self.cfg.jobs - self.running)
        order = sorted(range(len(self.pending)), key=lambda i: (env_key(self.pending[i]) != prefer, i))
        for i in order:
            spec = self.pending[i]
            exclusive = bool(spec.params.get("exclusive"))
            if exclusive and self.running:
                continue  # an engine-sized cell waits until the GPU is its own
            mem_gib = _as_float(spec.params.get("mem_gib"))
            limits: dict[str, float] = {"_exclusive": 1.0} if exclusive else {}
            if mem.unified:
                got = mem.unified_limits(mem_gib, free_slots, self.running)
                if got is None:
                    continue
                limits = got
            elif not mem.fits(mem_gib or 0.0, self.running_mem, self.running):
                continue
            limits["_reserved_gib"] = mem_gib or 0.0
            del self.pending[i]
            return spec, limits
        return None

    def take(self, prefer: tuple[tuple[str, str], ...] | None) -> tuple[CellSpec, dict[str, float]] | None:
        with self.cond:
            while True:
                if self.stop.is_set() or not self.pending:
                    return None
                got = self._pick(prefer)
                if got is not None:
                    self.running += 1
                    self.running_mem += got[1]["_reserved_gib"]
                    self.exclusive_running = "_exclusive" in got[1]
                    return got
                self.cond.wait(timeout=1.0)

    def release(self, limits: dict[str, float]) -> None:
        with self.cond:
            self.running -= 1
            self.running_mem -= limits.get("_reserved_gib", 0.0)
            if "_exclusive" in limits:
                self.exclusive_running = False
            self.cond.notify_all()

    def record(self, result: CellResult) -> None:
        with self.sink_lock:
            self.sink(result)
            self.report.results.append(result)

    def slot(self) -> None:
        warm: WorkerProc | None = None
        warm_key: tuple[tuple[str, str], ...] | None = None
        try:
            while True:
                got = self.take(warm_key)
                if got is None:
                    break
                spec, limits = got
                try:
                    warm, warm_key = self._run_one(spec, limits, warm, warm_key)
                finally:
                    self.release(limits)
        except BaseException as exc:
            log.exception("runner slot failed")
            self.errors.append(exc)
            self.stop.set()
        finally:
            if warm is not None:
                with contextlib.suppress(Exception):
                    warm.close()
                self.workers.discard(warm)

    def _spawn(self, env: dict[str, str], kind: str) -> WorkerProc:
        w = WorkerProc(self.cfg, env, kind)
        self.workers.add(w)
        return w

    def _params_for(self, spec: CellSpec, limits: dict[str, float]) -> dict[str, Any]:
        params = dict(spec.params)
        util = limits.get("gpu_memory_utilization")
        if util is not None:
            cur = _as_float(params.get("gpu_memory_utilization"))
            params["gpu_memory_utilization"] = util if cur is None else min(cur, util)
        return params

    def _run_one(
        self,
        spec: CellSpec,
        limits: dict[str, float],
        warm: WorkerProc | None,
        warm_key: tuple[tuple[str, str], ...] | None,
    ) -> tuple[WorkerProc | None, Any]:
        cfg = self.cfg
        timeout = cfg.timeout_override_s or spec.timeout_s
        params = self._params_for(spec, limits)
        if cfg.rss_cap_bytes:
            limits["rss_cap_bytes"] = float(
                min(cfg.rss_cap_bytes, limits.get("rss_cap_bytes", cfg.rss_cap_bytes))
            )
        isolated = spec.isolate or cfg.isolate_all or self.restarts >= cfg.max_restarts
        key = env_key(spec)
        try:
            if isolated:
                w = self._spawn(spec.env, "isolated")
                raw = w.run_cell(spec, params, limits, timeout, self.stop)
                self.workers.discard(w)
                kind = "isolated"
            else:
                if warm is not None and (warm.dead or warm_key != key):
                    warm.close()
                    self.workers.discard(warm)
                    warm = None
                if warm is None:
                    warm, warm_key = self._spawn(spec.env, "warm"), key
                raw = warm.run_cell(spec, params, limits, timeout, self.stop)
                kind = "warm"
                if warm.dead:
                    self.workers.discard(warm)
                    warm = None
                    if not raw.stopped:
                        with self.cond:
                            self.restarts += 1
                            self.report.worker_restarts = self.restarts
                        if self.restarts == cfg.max_restarts:
                            log.warning(
                                "warm workers crashed %d times; running the remaining cells isolated",
                                self.restarts,
                            )
        except OSError as exc:
            log.error("could not start a sandboxed child for %s: %s", spec.id, exc)
            with self.sink_lock:
                self.report.not_run[spec.id] = f"could not start a child: {exc}"
            return warm, warm_key
        if raw.stopped:
            with self.sink_lock:
                self.report.not_run[spec.id] = "interrupted"
            return warm, warm_key
        if limits:
            raw.notes.setdefault("_memory_limits", {k: v for k, v in limits.items() if not k.startswith("_")})
            if not raw.notes["_memory_limits"]:
                del raw.notes["_memory_limits"]
        result = build_result(spec, raw, kind, cfg.excerpt_chars)
        if kind == "warm" and raw.done is None and cfg.confirm_crashes and not self.stop.is_set():
            w = self._spawn(spec.env, "isolated")
            raw2 = w.run_cell(spec, params, limits, timeout, self.stop)
            self.workers.discard(w)
            if not raw2.stopped:
                again = build_result(spec, raw2, "isolated", cfg.excerpt_chars)
                again.details["warm_result"] = {
                    "outcome": result.outcome.value,
                    "root_cause": result.root_cause,
                    "signal": result.signal,
                    "exit_code": result.exit_code,
                }
                result = again
        self.record(result)
        return warm, warm_key

    def kill_all(self) -> None:
        for w in list(self.workers):
            with contextlib.suppress(Exception):
                procs.terminate_tree(w.pgid, w.token, grace_s=0.5, reap=w._reap, prefix=True)


def check_specs(specs: Iterable[CellSpec]) -> list[CellSpec]:
    out = list(specs)
    seen: set[str] = set()
    for s in out:
        if s.id in seen:
            raise UsageError(f"duplicate cell id in the plan: {s.id!r}")
        seen.add(s.id)
    return out


def run_cells(
    specs: Iterable[CellSpec],
    config: RunnerConfig | None = None,
    *,
    journal: Any = None,
    on_result: Callable[[CellResult], None] | None = None,
) -> RunReport:
    """Run ``specs`` (skipping ids already in ``journal``) and return every result.

    ``journal`` is a :class:`probe.sandbox.journal.Journal` (or None); each result is appended and
    fsync'ed before the next cell is recorded. ``on_result`` is called after each cell (progress).
    Ctrl-C stops the run: running children are killed, their cells stay un-journaled (a resume re-runs
    them) and ``report.interrupted`` is set (the KeyboardInterrupt is re-raised after cleanup).
    """
    cfg = config or RunnerConfig()
    if cfg.jobs < 1:
        raise UsageError(f"-j must be >= 1, got {cfg.jobs}")
    all_specs = check_specs(specs)
    report = RunReport()
    done_ids = set(journal.done_ids) if journal is not None else set()
    todo = []
    for s in all_specs:
        if s.id in done_ids:
            report.already_done.append(s.id)
        else:
            todo.append(s)

    def sink(result: CellResult) -> None:
        if journal is not None:
            journal.append(result)
        if on_result is not None:
            on_result(result)

    lock_tmp: str | None = None
    if cfg.jobs > 1 and not cfg.gpu_lock_dir:
        lock_tmp = tempfile.mkdtemp(prefix=f"probe-gpulock-{cfg.run_id}-")
        cfg = dataclasses.replace(cfg, gpu_lock_dir=lock_tmp)
    try:
        return _run_scheduled(todo, cfg, sink, report)
    finally:
        if lock_tmp:
            shutil.rmtree(lock_tmp, ignore_errors=True)


def _run_scheduled(
    todo: list[CellSpec], cfg: RunnerConfig, sink: Callable[[CellResult], None], report: RunReport
) -> RunReport:
    sched = _Scheduler(todo, cfg, sink, report)
    threads = [
        threading.Thread(target=sched.slot, name=f"probe-slot-{i}", daemon=True)
        for i in range(min(cfg.jobs, max(1, len(todo))))
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.2)
    except KeyboardInterrupt:
        report.interrupted = True
        sched.stop.set()
        sched.kill_all()
        for t in threads:
            t.join(timeout=30)
        for s in sched.pending:
            report.not_run.setdefault(s.id, "interrupted")
        raise
    if sched.errors:
        for s in sched.pending:
            report.not_run.setdefault(s.id, f"runner failed: {sched.errors[0]}")
        raise sched.errors[0]
    return report


def raise_nofile_limit() -> None:
    """Pipes and /proc scans need descriptors; lift the soft limit to the hard one."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
