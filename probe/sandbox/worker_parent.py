"""The parent's side of one sandboxed worker process (``python -m probe.sandbox.worker_child``).

A *warm* worker runs many cells in sequence, an *isolated* one a single cell. The parent sends
specs and receives events as JSON lines over private pipes, captures stdout+stderr (one stream, so
the order of lines is kept) into bounded head+tail buffers, samples the child tree's RSS, enforces the
cell's time limit (:func:`probe.sandbox.cellrun.cell_timed_out`) and the run's time budget, reports
long cells (heartbeats), and tears the whole tree down when the cell did not end
cleanly. Every child runs in its own session (``start_new_session=True``): a kill sends SIGTERM to the
group, waits a grace period, then SIGKILL; descendants that left the group (``setsid``) are found by
the ``PROBE_CELL_TOKEN`` in their environment and killed too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import signal
import subprocess
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from probe.cells import CellSpec
from probe.sandbox import gpu_procs, gpulock, procs, stacks
from probe.sandbox.capture import HeadTail
from probe.sandbox.cellrun import CellRun, cell_timed_out, heartbeat, mem_kill_reason
from probe.sandbox.config import RunnerConfig
from probe.sandbox.grant import CellGrant
from probe.sandbox.jit import CompileWatch

log = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20
_MAX_EVT_LINE = 64 << 20
_PKG_ROOT = str(Path(__file__).resolve().parents[2])

WorkerKind = Literal["warm", "isolated"]


DRIVER_JIT_CACHE_BYTES = str(4 << 30)


def _child_env(cfg: RunnerConfig, env: dict[str, str], token: str) -> dict[str, str]:
    base = dict(cfg.base_env if cfg.base_env is not None else os.environ)
    base.update(env)
    base[procs.TOKEN_VAR] = token
    base[procs.RUN_VAR] = cfg.run_id
    if cfg.gpu_lock_dir:
        base[gpulock.ENV_VAR] = cfg.gpu_lock_dir
    base.setdefault("PYTHONUNBUFFERED", "1")
    base.setdefault("PYTHONFAULTHANDLER", "1")
    # the driver's PTX-JIT cache (~/.nv/ComputeCache) drops what exceeds its size cap (256 MiB by
    # default); a module JIT-compiled from PTX (FA2 on sm_90) must stay cached from the warm pre-pass
    # to the timed cell and the next run
    base.setdefault("CUDA_CACHE_MAXSIZE", DRIVER_JIT_CACHE_BYTES)
    pp = base.get("PYTHONPATH", "")
    if _PKG_ROOT not in pp.split(os.pathsep):
        base["PYTHONPATH"] = _PKG_ROOT + (os.pathsep + pp if pp else "")
    return base


class WorkerProc:
    """One sandboxed worker process (warm: many cells; isolated: one cell, then it exits)."""

    def __init__(self, cfg: RunnerConfig, env: dict[str, str], kind: WorkerKind) -> None:
        self.cfg = cfg
        self.kind = kind
        self.token = f"{cfg.run_id}-{uuid.uuid4().hex[:10]}"
        self.cells_run = 0
        self.ready = False
        self.dead = False
        self.exit_code: int | None = None
        self.rusage_maxrss: int = 0
        self._evt_buf = b""
        self._pending_events: list[dict[str, Any]] = []
        self._discard = HeadTail(4096, 4096)  # output between cells
        self._start(_child_env(cfg, env, self.token))

    def _start(self, env: dict[str, str]) -> None:
        cmd_r, cmd_w = os.pipe()
        evt_r, evt_w = os.pipe()
        out_r, out_w = os.pipe()
        argv = [
            self.cfg.python,
            "-m",
            "probe.sandbox.worker_child",
            "--cmd-fd",
            str(cmd_r),
            "--evt-fd",
            str(evt_w),
        ]
        argv += ["--kind", self.kind, "--parent", str(os.getpid())]
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=out_w,
                pass_fds=(cmd_r, evt_w),
                start_new_session=True,
                env=env,
                close_fds=True,
            )
        except BaseException:
            for fd in (cmd_r, cmd_w, evt_r, evt_w, out_r, out_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise
        for fd in (cmd_r, evt_w, out_w):
            os.close(fd)
        self.pid = self.pgid = self.proc.pid
        self.cmd_w, self.evt_r, self.out_r = cmd_w, evt_r, out_r
        os.set_blocking(evt_r, False)
        os.set_blocking(out_r, False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(evt_r, selectors.EVENT_READ, "evt")
        self.sel.register(out_r, selectors.EVENT_READ, "out")
        self._out_open = self._evt_open = True

    # -- low level -------------------------------------------------------------------------------
    def _send(self, msg: dict[str, Any]) -> bool:
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.cmd_w, view)
                view = view[n:]
            return True
        except OSError:
            return False

    def reap(self, block: bool = False) -> bool:
        """Collect the worker's exit status if it has exited. True once it is reaped."""
        if self.proc.returncode is not None:
            return True
        try:
            pid, status, ru = os.wait4(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.proc.returncode = -1
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

    # -- one cell --------------------------------------------------------------------------------
    def run_cell(
        self,
        spec: CellSpec,
        params: dict[str, Any],
        grant: CellGrant,
        timeout_s: float,
        stop: threading.Event | None = None,
    ) -> CellRun:
        """Send one cell, watch it until it reports, dies, hangs, outgrows its memory or ``stop`` is set."""
        self.cells_run += 1
        cell_token = f"{self.token}/{self.cells_run}"
        run = CellRun(
            capture=HeadTail(self.cfg.head_bytes, self.cfg.tail_bytes),
            phase=None if self.ready else "startup",
            started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        # always watched (progress lines, a stop while compiling); the deadline moves only with a JIT budget
        run.jit = CompileWatch(jit_timeout_s=self.cfg.jit_timeout_s)
        t0 = time.monotonic()
        sent = self._send(self._run_message(spec, params, grant, cell_token))
        if sent and self.kind == "isolated":
            self._send({"op": "exit"})
        self._watch(run, spec, grant, (t0, timeout_s), sent, stop)
        run.wall_s = time.monotonic() - t0
        if run.done is not None:
            self._read_out(run.capture)  # whatever the child wrote before "done" is in the pipe now
            if self.kind == "isolated":
                self._finish_isolated(run)
            else:
                run.strays_killed = procs.kill_strays(cell_token, exclude=(self.pid,))
                if run.strays_killed:
                    log.info("cell %s left %d process(es) behind; killed", spec.id, len(run.strays_killed))
        else:
            if run.timed_out:
                self._dump_stacks(run)
            self._kill(run, term_first=not run.died)
        run.peak_rss = max(run.peak_rss, self.rusage_maxrss if self.kind == "isolated" else 0)
        if self.dead:  # the tree is gone: none of it may still hold a GPU
            run.gpu_check = gpu_procs.check_after_cell(run.seen_pids | set(run.strays_killed), self.token)
        return run

    @staticmethod
    def _run_message(spec: CellSpec, params: dict[str, Any], grant: CellGrant, token: str) -> dict[str, Any]:
        util = grant.gpu_memory_utilization
        return {
            "op": "run",
            "spec": spec.model_dump(mode="json"),
            "params": params,
            "token": token,
            "env": {} if util is None else {"PROBE_GPU_MEMORY_UTILIZATION": str(util)},
            "limits": grant.child_limits(),
        }

    def _watch(
        self,
        run: CellRun,
        spec: CellSpec,
        grant: CellGrant,
        start_limit: tuple[float, float],
        sent: bool,
        stop: threading.Event | None,
    ) -> None:
        next_sample = 0.0
        budget = spec.budget
        t0, limit_s = start_limit
        deadline = t0 + limit_s
        run_budget = self.cfg.budget
        every = self.cfg.heartbeat_s
        next_beat = t0 + every
        while True:
            now = time.monotonic()
            if now >= next_sample:
                next_sample = now + self.cfg.sample_interval_s
                run.tree_pids = procs.members(sid=self.pid, pgid=self.pgid)
                run.seen_pids.update(run.tree_pids)
                rss = procs.rss_bytes(run.tree_pids)
                run.peak_rss = max(run.peak_rss, rss)
                run.mem_kill = mem_kill_reason(rss, grant)
                if run.mem_kill:
                    return
            if every > 0 and now >= next_beat and self.cfg.on_heartbeat is not None:
                next_beat = now + every
                self.cfg.on_heartbeat(heartbeat(run, spec.id, now - t0, limit_s))
            # not capped by the deadline: a compiling cell's deadline moves (cell_timed_out decides)
            wait = max(0.0, min(next_sample - now, self.cfg.sample_interval_s))
            for key, _ in self.sel.select(timeout=wait):
                if key.data == "out":
                    self._read_out(run.capture)
                else:
                    self._read_evt()
            self._apply_events(run, spec.id)
            if run.done is not None:
                return
            # stop first: the prober's own interrupt sets it and then kills the worker, whose death
            # must not be recorded as the cell's crash ("killed by SIGTERM")
            if stop is not None and stop.is_set():
                run.stopped = True
                return
            if not sent or not self._evt_open or self.reap():
                run.died = True
                return
            if cell_timed_out(run, budget, time.monotonic(), deadline):
                run.timed_out = True
                return
            if run_budget is not None and time.monotonic() >= run_budget.deadline:
                run.budget_stopped = True
                return

    def _dump_stacks(self, run: CellRun, wait_s: float = 2.0) -> None:
        """A hung cell: ask the worker for its threads' Python stacks (faulthandler, SIGUSR1) and read
        them into the capture before the kill (``probe.sandbox.stacks`` parses them back out)."""
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except OSError:
            return
        before = run.capture.total
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not self.reap():
            self._read_out(run.capture)
            if run.capture.total > before and stacks.DUMP_MARKER.encode() in run.capture.getvalue()[-4096:]:
                time.sleep(0.1)  # the rest of the dump (every thread) follows at once
                self._read_out(run.capture)
                return
            time.sleep(0.02)

    def _apply_events(self, run: CellRun, cell_id: str) -> None:
        events, self._pending_events = self._pending_events, []
        for ev in events:
            kind = ev.get("ev")
            if kind == "ready":
                self.ready = True
                if run.phase == "startup":
                    run.phase = None
            elif ev.get("id") != cell_id:
                continue
            elif kind == "phase":
                run.phase = str(ev.get("name"))
            elif kind == "note":
                run.notes[str(ev.get("key"))] = ev.get("value")
            elif kind == "done":
                run.done = ev

    def _finish_isolated(self, run: CellRun) -> None:
        deadline = time.monotonic() + max(self.cfg.grace_s, 10.0)
        while time.monotonic() < deadline and not self.reap():
            self._read_out(run.capture)
            time.sleep(0.02)
        self._kill(run, term_first=self.proc.returncode is None)

    def _kill(self, run: CellRun, *, term_first: bool) -> None:
        """Tear down the whole worker tree; record its exit status."""
        self.dead = True

        def drain_and_reap() -> bool:
            self._read_out(run.capture)
            return self.reap()

        run.strays_killed = procs.terminate_tree(
            self.pgid,
            self.token,
            grace_s=self.cfg.grace_s if term_first else 0.0,
            reap=drain_and_reap,
            prefix=True,
            term_first=term_first,
        )
        self.reap(block=True)
        self._read_out(run.capture)
        self._close_fds()
        rc = self.proc.returncode
        run.exit_code = rc
        if rc is not None and rc < 0:
            try:
                run.signal = signal.Signals(-rc).name
            except ValueError:
                run.signal = f"signal {-rc}"

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
        while time.monotonic() < deadline and not self.reap():
            with contextlib.suppress(Exception):
                self._read_out(self._discard)
            time.sleep(0.02)
        self._kill(CellRun(capture=self._discard), term_first=self.proc.returncode is None)

    def kill_now(self) -> None:
        """Ctrl-C: kill the tree at once (no grace)."""
        procs.terminate_tree(self.pgid, self.token, grace_s=0.5, reap=self.reap, prefix=True)
