"""Parent side, step 2: run the oracle child in the image's Python and collect its typed answers.

The child (:mod:`probe.oracle.child`) imports vLLM, so it runs in its own process — the
interpreter given by ``--python`` (a venv, an image's Python) or this one — with a timeout, its
output size bounded, and ``CUDA_VISIBLE_DEVICES`` emptied (it never needs the GPU). ``PYTHONPATH``
gets a private directory holding only a ``probe`` link to this package, so the image needs none of
probe's dependencies and nothing else of this environment leaks in. Extra ``--pythonpath`` entries
(e.g. an unpacked vLLM wheel on the GPU box) go in front of it.

Nothing here imports torch or vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from probe.errors import InfraError
from probe.oracle.queries import OracleRequest

DEFAULT_TIMEOUT_S = 900.0
_MAX_STDERR = 4000


@dataclass(frozen=True)
class OracleAnswer:
    """One verdict of vLLM's own selection code for one (target, query, backend)."""

    kind: str  # "attention" | "moe"
    sm: int
    query: int  # index into the request's attention / moe queries
    backend: str  # backend enum name, --moe-backend value, or "auto"
    ok: bool | None  # None: the oracle could not ask (no adapter entry)
    message: str | None = None  # vLLM's refusal, verbatim
    file: str | None = None  # where the refusal's check lives, relative to site-packages
    line: int | None = None
    check: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> OracleAnswer:
        known = {"kind", "sm", "query", "backend", "ok", "message", "file", "line", "check"}
        return cls(
            kind=str(raw["kind"]),
            sm=int(raw["sm"]),
            query=int(raw["query"]),
            backend=str(raw["backend"]),
            ok=raw.get("ok"),
            message=raw.get("message"),
            file=raw.get("file"),
            line=raw.get("line"),
            check=raw.get("check"),
            extra={k: v for k, v in raw.items() if k not in known},
        )


@dataclass(frozen=True)
class OracleRun:
    versions: dict[str, str | None]
    skipped: str | None
    answers: tuple[OracleAnswer, ...]
    adapter: str | None = None
    fa: dict[str, Any] = field(default_factory=dict)
    moe_backends: tuple[str, ...] = ()
    wall_s: float = 0.0
    python: str = ""


def _has_libcuda() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _stub_libcuda(workdir: Path) -> str | None:
    """On a machine without the NVIDIA driver: an empty ``libcuda.so.1`` so vLLM's compiled modules load.

    vLLM's ``_C`` / FlashAttention extensions link ``libcuda.so.1``; the child loads them with
    ``RTLD_LAZY`` (``PROBE_ORACLE_LAZY=1``), so no driver function is resolved unless called — and the
    oracle calls none. Needs a C compiler (``cc``); returns the folder, or None when it cannot build one.
    """
    src = workdir / "stub.c"
    src.write_text("int probe_oracle_libcuda_stub(void) { return 0; }\n", encoding="utf-8")
    out = workdir / "stub" / "libcuda.so.1"
    out.parent.mkdir()
    try:
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)],
            capture_output=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return str(out.parent)


def _child_env(extra_paths: list[str], workdir: Path) -> dict[str, str]:
    link = workdir / "probe"
    link.symlink_to(Path(__file__).resolve().parent.parent, target_is_directory=True)
    env = dict(os.environ)
    stub = None if _has_libcuda() else _stub_libcuda(workdir)
    if stub:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(x for x in (stub, env.get("LD_LIBRARY_PATH")) if x)
        env["PROBE_ORACLE_LAZY"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([*(str(Path(p).resolve()) for p in extra_paths), str(workdir)])
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_child(
    request: OracleRequest,
    python: str | None = None,
    pythonpath: list[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    jobs: int | None = None,
) -> OracleRun:
    """Ask the oracle about every target of ``request``: one fresh child per target GPU.

    vLLM caches capability probes for the life of a process (``functools.cache`` on
    ``is_deep_gemm_supported``, platform priorities …) and computes some values at import time, so
    the first GPU a process asks about would stick for every later one: each target gets a process
    of its own, ``jobs`` at a time (default: the CPUs). A verdict never depends on which other GPUs
    were asked. Raises :class:`InfraError` when a child fails itself.
    """
    t0 = time.monotonic()
    parts = [replace(request, targets=(t,)) for t in request.targets] or [request]
    workers = max(1, min(len(parts), jobs or os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        runs = list(pool.map(lambda part: _run_one(part, python, pythonpath, timeout_s), parts))
    first = runs[0]
    return replace(
        first,
        skipped=next((r.skipped for r in runs if r.skipped), None),
        answers=tuple(a for r in runs for a in r.answers),
        wall_s=round(time.monotonic() - t0, 3),
    )


def _run_one(
    request: OracleRequest, python: str | None, pythonpath: list[str] | None, timeout_s: float
) -> OracleRun:
    """One child over ``request`` (in practice: one target)."""
    exe = python or sys.executable
    t0 = time.monotonic()
    raw = child_answer("probe.oracle.child", request.to_json(), "oracle child", exe, pythonpath, timeout_s)
    return OracleRun(
        versions=dict(raw.get("versions") or {}),
        skipped=raw.get("skipped"),
        answers=tuple(OracleAnswer.from_json(a) for a in raw.get("answers") or []),
        adapter=raw.get("adapter"),
        fa=dict(raw.get("fa") or {}),
        moe_backends=tuple(raw.get("moe_backends") or ()),
        wall_s=round(time.monotonic() - t0, 3),
        python=exe,
    )


def child_answer(
    module: str, request: Any, what: str, exe: str, pythonpath: list[str] | None, timeout_s: float
) -> dict[str, Any]:
    """Run ``exe -m module`` as a vLLM-side child (:func:`_child_env`: its own folder, no GPU) with
    ``request`` as JSON on stdin; its answer is the last JSON line it prints. InfraError, naming
    ``what``, when it cannot start, times out, exits without an answer or prints unreadable JSON."""
    with tempfile.TemporaryDirectory(prefix="probe-oracle-") as tmp:
        try:
            proc = subprocess.run(
                [exe, "-m", module],
                input=json.dumps(request),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=_child_env(list(pythonpath or []), Path(tmp)),
                cwd=tmp,
                check=False,
            )
        except FileNotFoundError as exc:
            raise InfraError(f"cannot run {exe}: {exc}") from exc
        except subprocess.TimeoutExpired as exc:
            raise InfraError(f"{what} ({exe}) timed out after {timeout_s:.0f} s") from exc
    tail = (proc.stderr or "")[-_MAX_STDERR:]
    lines = [ln for ln in (proc.stdout or "").splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise InfraError(f"{what} ({exe}) exited {proc.returncode} without an answer:\n{tail}")
    try:
        out: dict[str, Any] = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise InfraError(f"{what} ({exe}) printed unreadable JSON: {exc}") from exc
    return out
