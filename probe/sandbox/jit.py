"""JIT-aware limits: see when a sandboxed cell is compiling kernels, so a build is never taken for a hang.

FlashInfer (ninja -> nvcc -> cicc / ptxas), TVM-FFI, DeepGEMM, Triton (ptxas) and torch extensions
compile at first use; a cold FlashInfer CUTLASS MoE module takes minutes. The runner feeds a
:class:`CompileWatch` every sampling tick with the child tree's pids (``procs.members``) and the
bytes the child printed; the watch answers *is it compiling now*, *for how long so far* and *what*.
The runner then stretches the cell's deadline by the compile time (up to ``--jit-timeout``), marks
the phase ``jit`` and records ``details.compile_s``; a cell stopped while compiling gets
:meth:`CompileWatch.stopped_cause` as its root cause instead of a bare "no result after N s".

Evidence, cheapest first:

* a descendant process whose name is a compiler driver or one of its stages (``COMPILER_NAMES``);
* a JIT log line in the child's output: the ``jit`` phase markers of ``probe/data/signatures.json``
  (the classifier's own data, so both agree on what a JIT line is).

Also here: where the JIT caches live and how big they are (:func:`cache_report`), for the warm
pre-pass and the run's provenance. Parent-side code: no torch / vLLM imports.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probe.outcomes import COMPILE_STOP
from probe.sandbox import procs
from probe.sandbox.logtext import strip_prefixes
from probe.sandbox.ninja import BuildFiles, Units, ninja_files, output_build_file, status_line

DEFAULT_JIT_TIMEOUT_S = 1200.0
# /proc/<pid>/comm names (at most 15 characters) of compiler drivers and their stages
COMPILER_NAMES = frozenset(
    {
        "nvcc",
        "cicc",
        "ptxas",
        "nvlink",
        "fatbinary",
        "cudafe++",
        "ninja",
        "cc",
        "c++",
        "g++",
        "gcc",
        "cc1",
        "cc1plus",
        "clang",
        "clang++",
        "ld",
        "ld.gold",
        "ld.lld",
        "collect2",
        "as",
    }
)
_SOURCE = re.compile(r"[\w.+-]+\.(?:cu|cpp|cc|cxx|c|ptx)$")
_MAX_WHAT = 6


def comm(pid: int) -> str | None:
    """The process name from ``/proc/<pid>/comm`` (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return None


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def descendants(root: int, pids: Iterable[int] | None = None) -> list[int]:
    """Live descendants of ``root`` (by parent pid, from ``/proc/*/stat``); ``pids`` limits the scan."""
    parent: dict[int, int] = {}
    for pid in procs.all_pids() if pids is None else pids:
        info = procs.read_stat(pid)
        if info is not None and info.state not in ("Z", "X"):
            parent[pid] = info.ppid
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return sorted(out)


def compile_target(name: str, argv: list[str]) -> str | None:
    """What a compiler process is building: a source file's name, or ninja's build folder."""
    if name == "ninja":
        for flag in ("-C", "-f"):
            if flag in argv[:-1]:
                path = Path(argv[argv.index(flag) + 1])
                return (path if flag == "-C" else path.parent).name or None
        return None
    for arg in reversed(argv[1:]):
        base = Path(arg).name
        if _SOURCE.search(base):
            return base
    return None


def _jit_patterns() -> list[re.Pattern[str]]:
    from probe.catalog.signatures import signature_db

    return [p.pattern for p in signature_db().phases if p.phase == "jit"]


@dataclass(frozen=True)
class JitProgress:
    """A compile in flight, for progress lines: for how long, what, how far (ninja's build steps) and,
    from the rate so far, about how long it still needs (None: not known yet)."""

    compile_s: float
    what: tuple[str, ...]
    units: Units | None
    eta_s: float | None

    def text(self) -> str:
        what = ", ".join(self.what[-2:]) or "kernels"
        out = f"compiling {what} for {self.compile_s:.0f} s"
        if self.units is not None:
            out += f", {self.units.done} of {self.units.total} units built"
        if self.eta_s is not None:
            out += f", ~{self.eta_s:.0f} s left"
        return out


@dataclass
class CompileWatch:
    """Compile activity of one cell. Not thread-safe: one runner thread feeds and asks it."""

    jit_timeout_s: float = DEFAULT_JIT_TIMEOUT_S
    linger_s: float = 10.0  # a JIT log line counts as "compiling" for this long (no process seen)
    proc_linger_s: float = 2.0  # a compiler process seen counts this long (the gap between two steps)
    _last_proc_t: float | None = None
    clock: Callable[[], float] = time.monotonic
    read_comm: Callable[[int], str | None] = comm
    read_cmdline: Callable[[int], list[str]] = cmdline
    compile_s: float = 0.0
    tools: set[str] = field(default_factory=set)
    what: list[str] = field(default_factory=list)
    lines: int = 0
    last_line: str | None = None
    _procs_now: list[str] = field(default_factory=list)
    _last_line_t: float | None = None
    _last_tick: float | None = None
    _was_compiling: bool = False
    _partial: bytes = b""
    _patterns: list[re.Pattern[str]] | None = None
    _seen: int = 0  # bytes of the capture already fed
    _declared: str | None = None  # the child's own "compiling in-process" (phase jit)
    min_interval_s: float = 0.5  # update(): /proc is read at most this often
    units_interval_s: float = 2.0  # the build files' outputs are counted at most this often
    units: Units | None = None  # build steps done / planned (ninja), once a build file or status is seen
    _files: dict[str, Path] = field(default_factory=dict)  # ninja build file -> its working folder
    _ninja: BuildFiles = field(default_factory=BuildFiles)
    _units_t: float | None = None
    _rate_from: tuple[float, int] | None = None  # (compile_s, done) when the count was first known

    # -- feeding -----------------------------------------------------------------------------------
    def sample(self, pids: Iterable[int], now: float | None = None) -> bool:
        """One tick: look at the cell's processes, account compile time since the last tick."""
        now = self.clock() if now is None else now
        found: list[str] = []
        for pid in pids:
            name = self.read_comm(pid)
            if name is None or name not in COMPILER_NAMES:
                continue
            found.append(name)
            self.tools.add(name)
            argv = self.read_cmdline(pid)
            target = compile_target(name, argv)
            if target and target not in self.what and len(self.what) < _MAX_WHAT:
                self.what.append(target)
            self._note_build_file(name, argv)
        self._procs_now = found
        if found:
            self._last_proc_t = now
        compiling = self._active(now)
        if self._last_tick is not None and (self._was_compiling or compiling):
            self.compile_s += max(0.0, now - self._last_tick)
        self._last_tick = now
        self._was_compiling = compiling
        self._count_units(now)
        return compiling

    def _note_build_file(self, name: str, argv: list[str]) -> None:
        if name == "ninja":
            got = ninja_files(argv)
            if got is not None:
                self._files.setdefault(*got)
        elif len(self._files) < 16:
            path = output_build_file(argv)
            if path is not None:
                self._files.setdefault(path, Path(path).parent)

    def add_build_file(self, path: str, base: str | None = None) -> None:
        """A ninja build file the child named (``ctx.note("jit_build_file", ...)``): count its steps."""
        self._files.setdefault(path, Path(base) if base else Path(path).parent)

    def _count_units(self, now: float, force: bool = False) -> None:
        recent = self._units_t is not None and now - self._units_t < self.units_interval_s
        if not self._files or (recent and not force):
            return
        self._units_t = now
        counted = self._ninja.units(self._files, self._files)
        if counted is not None:
            self._set_units(counted)

    def _set_units(self, units: Units) -> None:
        if units.source != "build.ninja" and self.units is not None and self.units.source == "build.ninja":
            return  # the count on disk (earlier builds included) wins over this invocation's status
        self.units = units
        if self._rate_from is None:
            self._rate_from = (self.compile_s, units.done)

    def feed_output(self, data: bytes, now: float | None = None) -> None:
        """New bytes of the child's stdout/stderr (any chunking)."""
        if not data:
            return
        now = self.clock() if now is None else now
        if self._patterns is None:
            self._patterns = _jit_patterns()
        text = self._partial + data
        *complete, self._partial = text.split(b"\n")
        self._partial = self._partial[-4096:]
        for raw in complete:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            status = status_line(strip_prefixes(line).strip())
            if status is not None:
                self._set_units(Units(status[0], status[1], "ninja status"))
            if any(p.search(line) for p in self._patterns):
                self.lines += 1
                self.last_line = (strip_prefixes(line).strip() or line)[:300]
                self._last_line_t = now

    def observe(self, capture: Any, now: float | None = None) -> None:
        """Feed what a ``HeadTail`` capture received since the last call (``total`` / ``getvalue``)."""
        new = int(capture.total) - self._seen
        if new <= 0:
            return
        data = capture.getvalue()
        self.feed_output(data[-new:] if new < len(data) else data, now)
        self._seen = int(capture.total)

    def update(
        self, pids: Iterable[int], capture: Any, now: float | None = None, declared: str | None = None
    ) -> None:
        """The runner's one call per loop turn: new output, and (rate-limited) the process tree.
        ``declared``: the child says it is compiling in-process (phase ``jit``: the CUDA driver's PTX
        JIT, which shows no compiler process and no log line); the text says what."""
        now = self.clock() if now is None else now
        self.observe(capture, now)
        self._declared = declared
        if declared:
            self.tools.add("driver")
            if declared not in self.what and len(self.what) < _MAX_WHAT:
                self.what.append(declared)
        if self._last_tick is None or now - self._last_tick >= self.min_interval_s:
            self.sample(pids, now)

    # -- asking ------------------------------------------------------------------------------------
    def _active(self, now: float) -> bool:
        recent_line = self._last_line_t is not None and now - self._last_line_t <= self.linger_s
        recent_proc = self._last_proc_t is not None and now - self._last_proc_t <= self.proc_linger_s
        return bool(self._procs_now) or recent_proc or recent_line or bool(self._declared)

    def compiling_now(self, now: float | None = None) -> bool:
        return self._active(self.clock() if now is None else now)

    def compile_seconds(self) -> float:
        return self.compile_s

    def last_activity(self) -> str | None:
        """A short description of the latest compile evidence (processes, else the JIT log line)."""
        if self._declared:
            return self._declared
        if self._procs_now:
            names = sorted(set(self._procs_now))
            return ", ".join(names) + (f" building {', '.join(self.what[-3:])}" if self.what else "")
        return self.last_line

    def deadline(self, base_deadline: float) -> float:
        """The cell's deadline with its compile time given back, up to ``jit_timeout_s``."""
        return base_deadline + min(self.compile_s, self.jit_timeout_s)

    def budget_spent(self) -> bool:
        return self.compile_s >= self.jit_timeout_s

    def progress(self) -> JitProgress:
        """How the compile goes (for progress lines); the estimate needs two counts of built units."""
        eta = None
        if self.units is not None and self._rate_from is not None:
            spent = self.compile_s - self._rate_from[0]
            built = self.units.done - self._rate_from[1]
            if spent > 0 and built > 0:
                eta = (self.units.total - self.units.done) * spent / built
        return JitProgress(round(self.compile_s, 1), tuple(self.what), self.units, eta)

    def stopped_cause(self, why: str | None = None) -> str | None:
        """Root cause for a cell stopped while compiling (None: it was not compiling at the last tick):
        ``compile budget exceeded after N s, M of K units built (what); why``. ``why`` says which limit
        stopped it (default: the cell's JIT time limit when that was spent)."""
        if not self._was_compiling:  # as of the last tick (the runner samples, then checks its deadline)
            return None
        what = ", ".join(self.what) if self.what else (self.last_line or "kernels")
        self._count_units(self.clock(), force=True)  # what is on disk now, after the stop
        u = self.units
        built = f", {u.done} of {u.total} units built" if u is not None else ", units built unknown"
        if why is None and self.budget_spent():
            why = f"the JIT time limit of {self.jit_timeout_s:.0f} s was spent"
        tail = f"; {why}" if why else ""
        return f"{COMPILE_STOP} after {self.compile_s:.0f} s{built} (JIT-compiling {what}){tail}"

    def details(self) -> dict[str, Any]:
        """What goes into the cell's ``details`` (empty when nothing was compiled)."""
        if not (self.compile_s or self.tools or self.lines):
            return {}
        out: dict[str, Any] = {"compile_s": round(self.compile_s, 1)}
        if self.tools:
            out["jit_tools"] = sorted(self.tools)
        if self.what:
            out["jit_targets"] = list(self.what)
        if self.lines:
            out["jit_log_lines"] = self.lines
        if self.units is not None:
            out["jit_units"] = {"done": self.units.done, "total": self.units.total, "from": self.units.source}
        return out


# -- caches ----------------------------------------------------------------------------------------
def cache_dirs(env: dict[str, str] | None = None, home: str | None = None) -> dict[str, Path]:
    """Where each JIT cache lives for this environment (the libraries' own env vars, then defaults)."""
    env = dict(os.environ) if env is None else env
    home_dir = Path(home or env.get("HOME") or Path.home())
    user = env.get("USER") or env.get("LOGNAME") or "root"
    fi_base = Path(env.get("FLASHINFER_WORKSPACE_BASE") or home_dir)
    triton_home = Path(env.get("TRITON_HOME") or home_dir)
    triton = env.get("TRITON_CACHE_DIR") or str(triton_home / ".triton" / "cache")
    return {
        "flashinfer": fi_base / ".cache" / "flashinfer",
        "triton": Path(triton),
        "deep_gemm": Path(env.get("DG_JIT_CACHE_DIR") or home_dir / ".deep_gemm"),
        "vllm": Path(env.get("VLLM_CACHE_ROOT") or home_dir / ".cache" / "vllm"),
        "torch_inductor": Path(env.get("TORCHINDUCTOR_CACHE_DIR") or f"/tmp/torchinductor_{user}"),
        "torch_extensions": Path(env.get("TORCH_EXTENSIONS_DIR") or home_dir / ".cache" / "torch_extensions"),
        "cute_dsl": Path(env.get("CUTE_DSL_CACHE_DIR") or f"/tmp/{user}/cutlass_python_cache"),
        "cuda_driver": Path(env.get("CUDA_CACHE_PATH") or home_dir / ".nv" / "ComputeCache"),  # PTX JIT
    }


def dir_size(path: Path, max_entries: int = 200_000) -> tuple[int, int]:
    """(bytes, files) under ``path`` (0, 0 when absent); stops counting after ``max_entries``."""
    total = files = 0
    for n, (root, _, names) in enumerate(os.walk(path)):
        if n > max_entries:
            break
        for name in names:
            try:
                total += os.lstat(Path(root) / name).st_size
                files += 1
            except OSError:
                continue
    return total, files


def cache_report(env: dict[str, str] | None = None, home: str | None = None) -> dict[str, dict[str, Any]]:
    """{cache: {path, exists, bytes, files}} for every JIT cache of :func:`cache_dirs`."""
    out: dict[str, dict[str, Any]] = {}
    for name, path in cache_dirs(env, home).items():
        size, files = dir_size(path) if path.is_dir() else (0, 0)
        out[name] = {"path": str(path), "exists": path.is_dir(), "bytes": size, "files": files}
    return out
