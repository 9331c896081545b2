"""What every GPU probe needs inside the sandboxed child: the one-time vLLM runtime of a warm worker (a
world-size-1 distributed state, the TP / PP / DCP groups kernels and attention impls query, and vLLM's
workspace manager) and the CUDA-event timer."""

from __future__ import annotations

import contextlib
import tempfile
from typing import Any

_STATE: dict[str, Any] = {}  # per process (a warm worker runs many cells)


def ensure_runtime(torch: Any) -> None:
    """Distributed state of world size 1 + workspace, once per process."""
    if _STATE.get("ready"):
        return
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    torch.cuda.set_device(0)
    with set_current_vllm_config(VllmConfig()):
        if not model_parallel_is_initialized():
            init_distributed_environment(
                world_size=1,
                rank=0,
                local_rank=0,
                distributed_init_method=f"file://{tempfile.mkstemp()[1]}",
                backend="nccl",
            )
            initialize_model_parallel(1, 1)
    with contextlib.suppress(ImportError):  # older vLLM: no workspace manager
        from vllm.v1.worker.workspace import init_workspace_manager, is_workspace_manager_initialized

        if not is_workspace_manager_initialized():
            init_workspace_manager(torch.device("cuda:0"))
    _STATE["ready"] = True


def time_ms(fn: Any, torch: Any, warmup: int, iters: int) -> float:
    """Median CUDA-event time of ``fn`` in ms, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return float(times[len(times) // 2])
