"""Data-parallel engine cells: one ``vllm.LLM`` per DP rank, as vLLM's offline data-parallel recipe runs
them (``examples/features/data_parallel/data_parallel_offline.py``).

``LLM(data_parallel_size=N)`` in one process is refused by vLLM; instead each rank is a process of its
own with ``VLLM_DP_RANK`` / ``VLLM_DP_SIZE`` / ``VLLM_DP_MASTER_*`` set, and vLLM gives every rank's engine
its own GPUs. With expert parallelism the MoE then runs over all ranks through the all2all backend
(``--all2all-backend``, read from the cell's engine arguments), which is what these cells measure.

Runs only inside the sandboxed child. The rank processes are spawned (no fork after CUDA), inherit the
child's stdout / stderr (their tracebacks reach the cell log the classifier reads) and its
``PROBE_CELL_TOKEN`` (the runner's teardown finds them). One rank that fails is reported as the cell's
failure; the others are stopped after a grace period instead of waiting forever in a collective.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import socket
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from typing import Any

from probe.cell_params import EngineParams
from probe.cells import ProbeContext
from probe.outcomes import StackFailure
from probe.probes.common import not_run, result, skipped
from probe.versions import at_least

#: seconds the other ranks get to finish once one rank has failed (then they are stopped)
FAILED_RANK_GRACE_S = 45.0
#: seconds a rank that reported its result gets to shut its engine down before it is stopped
EXIT_GRACE_S = 60.0


def all2all_precheck(p: EngineParams) -> dict[str, Any] | None:
    """A ready ``skipped`` / ``not_run`` result for an all2all backend this vLLM or image cannot run
    (read from the catalog and the installed distributions; nothing imported), or None."""
    from probe.catalog.backends import catalog

    name = p.extra_engine_args.get("all2all_backend")
    if not name:
        return None
    cat = catalog()
    rec = cat.find("all2all", name)
    if rec is None:
        gap = cat.gap("all2all", name)
        return skipped(
            f"all2all backend {name!r} is not covered by probe: {gap.reason if gap else 'unknown'}"
        )
    try:
        have = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None  # the engine start reports the missing vLLM
    if rec.vllm.platform != "cuda":
        return skipped(f"all2all backend {name} is for {rec.vllm.platform.upper()} GPUs only")
    if rec.vllm.since and not at_least(have, rec.vllm.since):
        return skipped(f"vLLM {have} has no all2all backend {name} (added in {rec.vllm.since})")
    if rec.vllm.until and at_least(have, rec.vllm.until):
        return skipped(f"vLLM {have} no longer has all2all backend {name}: {rec.vllm.note or 'removed'}")
    for need in cat.imports_of("all2all", name):
        if importlib.util.find_spec(need["module"]) is None:
            return not_run(
                f"all2all backend {name} needs {need['module']} ({need['install']}), which this image "
                "does not have: not measured"
            )
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_main(
    rank: int, dp: int, port: int, model_dir: str, kw: dict[str, Any], check: tuple[Any, ...], out: Any
) -> None:
    """One DP rank (a spawned process): start the engine, generate, report on ``out``, shut down."""
    os.environ.update(
        VLLM_DP_RANK=str(rank),
        VLLM_DP_RANK_LOCAL=str(rank),
        VLLM_DP_SIZE=str(dp),
        VLLM_DP_MASTER_IP="127.0.0.1",
        VLLM_DP_MASTER_PORT=str(port),
        # the recipe's engine core process per rank (vLLM gives it the rank's GPUs); it inherits the
        # cell token, so the runner's teardown reaches it too
        VLLM_ENABLE_V1_MULTIPROCESSING="1",
    )
    generate, inspect, stop, vocab, tokens = check
    try:
        import vllm

        t0 = time.perf_counter()
        llm = vllm.LLM(model=model_dir, **kw)
        init_s = time.perf_counter() - t0
        out.put({"rank": rank, "status": "started", "init_s": init_s})
        engine = llm.apply_model(inspect)[0]
        parallel = getattr(getattr(llm.llm_engine, "vllm_config", None), "parallel_config", None)
        info, problem, timings = generate(llm, vocab, tokens)
        out.put(
            {
                "rank": rank,
                "status": "wrong_output" if problem else "ok",
                "problem": problem,
                "init_s": init_s,
                "timings": timings,
                "engine": engine,
                "all2all_backend": getattr(parallel, "all2all_backend", None),
                "info": info,
            }
        )
        time.sleep(1.0)  # let the other ranks' engines leave their step loops (vLLM's recipe does too)
        stop(llm)
    except BaseException as exc:  # the traceback goes to the cell log; the parent words the outcome
        traceback.print_exc()
        out.put({"rank": rank, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]})
        raise SystemExit(1) from None


def _drain(box: Any, reports: dict[int, dict[str, Any]], wait_s: float) -> None:
    try:
        msg = box.get(timeout=wait_s)
    except queue.Empty:
        return
    if msg.get("status") != "started" or msg["rank"] not in reports:
        reports[msg["rank"]] = msg


def _failed_rank(procs: list[Any], reports: dict[int, dict[str, Any]]) -> int | None:
    for rank, proc in enumerate(procs):
        rep = reports.get(rank, {})
        if rep.get("status") == "error" or (proc.exitcode not in (None, 0) and rep.get("status") != "ok"):
            return rank
    return None


def collect(procs: list[Any], box: Any, ctx: ProbeContext) -> dict[int, dict[str, Any]]:
    """Every rank's last report; once a rank failed, the others get FAILED_RANK_GRACE_S, then stop."""
    reports: dict[int, dict[str, Any]] = {}
    failed_at: float | None = None
    generating = False
    while True:
        _drain(box, reports, 0.5)
        if not generating and len(reports) == len(procs) and all("init_s" in r for r in reports.values()):
            generating = True  # every rank's engine is up
            ctx.phase("generate")
        final = [
            r
            for r in range(len(procs))
            if reports.get(r, {}).get("status") in ("ok", "wrong_output", "error")
        ]
        if len(final) == len(procs):
            break
        if failed_at is None and _failed_rank(procs, reports) is not None:
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > FAILED_RANK_GRACE_S:
            break
        if all(p.exitcode is not None for p in procs):
            _drain(box, reports, 1.0)
            break
    for rank in stop_ranks(procs, EXIT_GRACE_S if failed_at is None else 5.0):
        reports.setdefault(rank, {"rank": rank, "status": "stopped"})
        if reports[rank].get("status") == "started":
            reports[rank] = {**reports[rank], "status": "stopped"}
    return reports


def stop_ranks(procs: list[Any], grace_s: float) -> list[int]:
    """Join the ranks for ``grace_s``, then terminate (and kill) what still runs; the ranks stopped."""
    deadline = time.monotonic() + grace_s
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    stopped = []
    for rank, proc in enumerate(procs):
        if proc.exitcode is None:
            stopped.append(rank)
            proc.terminate()
            proc.join(10)
        if proc.exitcode is None:
            proc.kill()
            proc.join(5)
    return stopped


def run_ranks(
    model_dir: str,
    kw: dict[str, Any],
    p: EngineParams,
    ctx: ProbeContext,
    details: dict[str, Any],
    check: tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], int, int],
) -> dict[str, Any]:
    """Start ``p.effective_dp`` rank processes and turn their reports into the cell's result."""
    import multiprocessing as mp

    spawn = mp.get_context("spawn")
    box = spawn.Queue()
    dp, port = p.effective_dp, free_port()
    details["parallel"]["data_parallel_master_port"] = port
    ctx.phase("engine_init")
    procs = [
        spawn.Process(
            target=rank_main, args=(r, dp, port, model_dir, kw, check, box), name=f"probe-dp-rank{r}"
        )
        for r in range(dp)
    ]
    for proc in procs:
        proc.start()
    reports = collect(procs, box, ctx)
    details["ranks"] = [_rank_summary(r, reports.get(r), procs[r].exitcode) for r in range(dp)]
    return rank_outcome(p, reports, [proc.exitcode for proc in procs], details)


def _rank_summary(rank: int, rep: dict[str, Any] | None, exitcode: int | None) -> dict[str, Any]:
    rep = rep or {}
    info = rep.get("info") or {}
    return {
        "rank": rank,
        "status": rep.get("status", "no report"),
        "exitcode": exitcode,
        "init_s": rep.get("init_s"),
        "tokens_per_s": (rep.get("timings") or {}).get("tokens_per_s"),
        "all2all_backend": rep.get("all2all_backend"),
        "tokens": info.get("tokens"),
        "error": rep.get("error"),
        "problem": rep.get("problem"),
    }


def _blamed_rank(reports: dict[int, dict[str, Any]], n: int) -> int | None:
    """The rank whose failure is the cell's: the first that raised, else the first that died without a
    result, else the first stopped after the others ended; None when every rank gave a result."""
    status = [(reports.get(r) or {}).get("status") for r in range(n)]
    for wanted in (("error",), (None, "started"), ("stopped",)):
        hit = next((r for r in range(n) if status[r] in wanted), None)
        if hit is not None:
            return hit
    return None


def _exit_words(code: int | None, status: str | None) -> str:
    if status == "stopped":
        return "still running after another rank had failed (stopped: waiting in a collective)"
    if code is None:
        return "still running"
    return f"exit code {code}" if code >= 0 else f"signal {-code}"


def rank_outcome(
    p: EngineParams, reports: dict[int, dict[str, Any]], exitcodes: list[int | None], details: dict[str, Any]
) -> dict[str, Any]:
    """The cell's result from the ranks' reports: the first failing rank decides (an exception is raised
    for the sandbox's classifier to read with the log), wrong output on any rank is ``wrong_output``, a
    name vLLM replaced is ``skipped``; else ``ok`` with the engine and timings of rank 0. A failed or
    silent rank raises :class:`StackFailure` (with ``details``): the classifier reads its cause from the
    cell log, where the rank's traceback went."""
    blamed = _blamed_rank(reports, len(exitcodes))
    if blamed is not None:
        rep, n = reports.get(blamed) or {}, len(exitcodes)
        if rep.get("status") == "error":
            raise StackFailure(f"data-parallel rank {blamed} of {n} failed: {rep['error']}", details)
        why = _exit_words(exitcodes[blamed], rep.get("status"))
        raise StackFailure(f"data-parallel rank {blamed} of {n} gave no result: {why}", details)
    wrong = [(r, rep) for r, rep in sorted(reports.items()) if rep["status"] == "wrong_output"]
    first = reports[0]
    details["engine"] = first.get("engine")
    timings = {"init_s": max(r["init_s"] for r in reports.values()), **(first.get("timings") or {})}
    if wrong:
        rank, rep = wrong[0]
        return result(
            "wrong_output", f"data-parallel rank {rank}: {rep['problem']}", timings=timings, details=details
        )
    asked, used = p.extra_engine_args.get("all2all_backend"), first.get("all2all_backend")
    if asked and used and asked != used:
        return skipped(
            f"vLLM replaced all2all backend {asked} with {used}: {asked} itself was not run", details
        )
    infos = [r.get("info") or {} for r in reports.values()]
    degraded = []
    if all(i.get("uniform_logits") for i in infos):
        degraded.append("dummy weights give uniform logits: end-to-end run check, not a numeric check")
    if len({str((r.get("info") or {}).get("tokens")) for r in reports.values()}) > 1:
        degraded.append("the data-parallel ranks generated different tokens for the same prompts")
    return result("ok", None, timings=timings, details=details, degraded=degraded)
