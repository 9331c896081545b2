"""The outcome vocabulary: one value per probe cell, used verbatim in JSON, journals and matrices."""

from __future__ import annotations

from enum import Enum
from typing import Any


class Outcome(str, Enum):
    OK = "ok"  # ran, output matched the reference
    WRONG_OUTPUT = "wrong_output"  # ran; NaN / inf / all-zero / off the reference
    UNSUPPORTED = "unsupported"  # backend refused cleanly (its own ValueError, "not supported")
    NO_KERNEL_IMAGE = "no_kernel_image"  # no loadable SASS/PTX for this GPU (incl. PTX too new)
    JIT_FAILED = "jit_failed"  # nvcc / ptxas / ninja / Triton could not build for this arch
    IMPORT_ERROR = "import_error"  # undefined symbol, ABI mismatch, missing module
    API_MISMATCH = "api_mismatch"  # library versions disagree (unexpected keyword, no attribute)
    KERNEL_INIT_FAILED = "kernel_init_failed"  # CUTLASS / TRT-LLM kernel initialize / run refused
    DEVICE_FAULT = "device_fault"  # illegal address / instruction, launch failure, trap
    OOM = "oom"  # CUDA OOM or killed by the OOM killer
    TIMEOUT = "timeout"  # hang
    CRASHED = "crashed"  # signal or non-zero exit with no better cause
    SKIPPED = "skipped"  # not applicable (backend absent in this vLLM, no GPU, ...)
    NOT_RUN = "not_run"  # planned, not measured: the run's time budget, a compile stopped unfinished

    @property
    def passed(self) -> bool:
        return self is Outcome.OK

    @property
    def failed(self) -> bool:
        """A real failure of the probed stack (not ok, not skipped, not unmeasured)."""
        return self not in (Outcome.OK, Outcome.SKIPPED, Outcome.NOT_RUN)


class StackFailure(RuntimeError):
    """The probed stack failed in a process probe supervises (a data-parallel rank of an engine cell):
    raised by probe's code to hand that failure, with ``details``, to the sandbox's classifier, which
    reads the cause from the cell's log. Never attributed to probe as its own bug."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


OUTCOME_HELP: dict[Outcome, str] = {
    Outcome.OK: "ran and matched the reference",
    Outcome.WRONG_OUTPUT: "ran, but the output was NaN/inf/all-zero or off the reference",
    Outcome.UNSUPPORTED: "the backend refused this configuration cleanly",
    Outcome.NO_KERNEL_IMAGE: "no loadable SASS/PTX for this GPU",
    Outcome.JIT_FAILED: "a runtime compiler (nvcc/ptxas/ninja/Triton) failed",
    Outcome.IMPORT_ERROR: "a module or shared library could not be imported",
    Outcome.API_MISMATCH: "installed library versions disagree on an API",
    Outcome.KERNEL_INIT_FAILED: "a CUTLASS/TRT-LLM kernel refused to initialize or run",
    Outcome.DEVICE_FAULT: "the GPU faulted (illegal address/instruction, launch failure, trap)",
    Outcome.OOM: "out of memory (CUDA allocator or the OOM killer)",
    Outcome.TIMEOUT: "hung past its time limit and was killed",
    Outcome.CRASHED: "died from a signal or a non-zero exit with no better cause",
    Outcome.SKIPPED: "not applicable here",
    Outcome.NOT_RUN: "planned, not measured (time budget spent, or a compile stopped unfinished): unknown",
}

#: the root cause of a cell stopped while it JIT-compiled (``probe.sandbox.jit``); journals written before
#: the ``not_run`` outcome recorded such a stop as ``timeout`` with the older prefix
COMPILE_STOP = "compile budget exceeded"
_OLD_COMPILE_STOP = "probe: stopped while JIT-compiling"


def compile_stop(outcome: str | None, root_cause: str | None) -> bool:
    """A cell stopped while it compiled kernels: the compile did not finish, so the cell says nothing
    about whether the backend works (``not_run`` now; ``timeout`` in older journals and matrices)."""
    cause = root_cause or ""
    if outcome == Outcome.NOT_RUN.value:
        return cause.startswith(COMPILE_STOP)
    return outcome == Outcome.TIMEOUT.value and cause.startswith(_OLD_COMPILE_STOP)


def unknown(outcome: str | None, root_cause: str | None) -> bool:
    """The cell's result is unknown: it was not run, or it was stopped while compiling. ``recommend`` and
    ``gate`` treat such a cell as no evidence either way (never a failure, never a regression)."""
    return outcome == Outcome.NOT_RUN.value or compile_stop(outcome, root_cause)
