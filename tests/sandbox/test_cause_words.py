"""The generic reading behind the signatures: cause words on error lines and unexplained exceptions.

The lines below come from libraries no signature names (``libfoo``, ``acme``): the words alone decide,
which is what a log from a library the corpus has never seen gets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from probe.catalog.signatures import SignatureDB
from probe.outcomes import Outcome
from probe.sandbox.classifier import classify_text

ROOT = Path(__file__).resolve().parents[2]

WORDED = [
    ("[acme][ERROR] Failed to allocate 2.00 GiB for the staging buffer on device 0", "oom", "oom-words"),
    ("E1120 10:00:00.1 acme.cc:12] page fault on device 0 while running gemm", "device_fault", "fault-words"),
    ("acme: no kernel image for sm_121 in libacme_kernels.so", "no_kernel_image", "image-words"),
    ("[acme] error: cannot load libacme_cuda13.so (built for another CUDA)", "import_error", "load-words"),
    ("acme_jit: build failed for kernel gemm_128x128 (see compiler output)", "jit_failed", "build-words"),
    (
        "acme error: plugin version 2.1 does not match the runtime version 2.3",
        "api_mismatch",
        "version-words",
    ),
    ("[acme][ERROR] collective barrier timed out after 600 s", "timeout", "timeout-words"),
    (
        "acme::GemmRunner error: failed to initialize the grouped GEMM for 8 experts",
        "kernel_init_failed",
        "init-words",
    ),
    ("[acme][ERROR] not enough shared memory for tile 256x128", "kernel_init_failed", "init-words"),
    ("acme check failed: inf values detected in the output of layer 3", "wrong_output", "wrong-words"),
    ("[acme][FATAL] this build does not support bf16 accumulation", "unsupported", "refusal-words"),
]


@pytest.mark.parametrize(("line", "outcome", "words"), WORDED, ids=[w[2] for w in WORDED])
def test_an_error_line_no_signature_knows_is_read_by_its_words(line, outcome, words):
    v = classify_text(f"INFO starting\n{line}\nSegmentation fault (core dumped)\n")
    assert (v.outcome.value, v.rule, v.signature) == (outcome, "inferred-cause", f"words:{words}")
    assert v.root_cause == line


@pytest.mark.parametrize(
    "line",
    [
        "WARNING acme: failed to allocate the pinned buffer, falling back to pageable memory",
        "[acme] kernel cache miss: compiling gemm (build failed once before, retrying)",
        "INFO acme: 0 errors, the workspace is 128 MiB",
        "acme: this build does not support bf16 accumulation",  # no error marker
    ],
)
def test_warnings_fallbacks_and_unmarked_lines_state_no_cause(line):
    v = classify_text(f"INFO starting\n{line}\nINFO done\n")
    assert v.outcome is Outcome.OK, (v.rule, v.root_cause)


def test_strong_words_need_no_error_marker():
    v = classify_text("acme: the fatbin has no binary for the GPU (sm_121)\n")
    assert (v.outcome, v.rule) == (Outcome.NO_KERNEL_IMAGE, "inferred-cause")


def test_an_unexplained_exception_is_read_by_its_words():
    log = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n    run()\n'
        "acme.GemmError: could not create the plan for 8 experts\n"
    )
    v = classify_text(log)
    assert (v.outcome, v.rule, v.signature) == (
        Outcome.KERNEL_INIT_FAILED,
        "inferred-cause",
        "words:init-words",
    )


def test_a_specific_signature_outranks_earlier_words():
    log = (
        "[acme][ERROR] failed to initialize the profiler\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    v = classify_text(log)
    assert (v.outcome, v.rule) == (Outcome.DEVICE_FAULT, "stated-cause")


def test_a_path_is_not_a_word():
    v = classify_text("[acme][ERROR] assertion in /workspace/acme/manager.cpp:256\n")
    assert v.rule != "inferred-cause", (v.outcome, v.signature)


def test_a_wrapper_is_read_by_its_words_and_keeps_its_own_class_when_they_say_nothing():
    v = classify_text("Worker failed with error 'acme: the device heap is exhausted', see the trace above\n")
    assert (v.outcome, v.rule) == (Outcome.OOM, "inferred-cause")
    v = classify_text("[TensorRT-LLM][ERROR] acme plugin: page fault in warp 2\n")
    assert (v.outcome, v.rule) == (Outcome.DEVICE_FAULT, "inferred-cause")
    v = classify_text("[TensorRT-LLM][ERROR] Assertion failed: mNextBlocks.empty()\n")
    assert v.rule != "inferred-cause", (v.outcome, v.signature)
    v = classify_text("python serve.py\nKilled\n")
    assert (v.outcome, v.rule) == (Outcome.OOM, "wrapper")


def test_an_exception_message_continued_below_is_read():
    log = (
        "RuntimeError: Error in function 'aligned_alloc' at /src/acme/allocator.h:49:\n"
        "the staging pool is exhausted (prefill_tmp)\n"
    )
    v = classify_text(log)
    assert (v.outcome, v.rule, v.line_number) == (Outcome.OOM, "inferred-cause", 2)


def test_an_exception_is_not_an_echo_because_an_echo_is_glued_to_it():
    log = (
        "torch.AcceleratorError: CUDA error: acme kernel trap CUDA kernel errors might be asynchronously "
        "reported at some other API call\n"
    )
    v = classify_text(log)
    assert (v.outcome, v.rule) == (Outcome.DEVICE_FAULT, "stated-cause"), v.signature


def test_cause_words_are_validated():
    base = json.loads((ROOT / "probe" / "data" / "signatures.json").read_text())
    base["cause_words"].append(dict(base["cause_words"][0]))
    with pytest.raises(ValidationError, match="duplicate cause_words id"):
        SignatureDB.model_validate(base)
    base["cause_words"][-1] = dict(base["cause_words"][0], id="broken", words="(unclosed")
    with pytest.raises(ValidationError, match="bad regex"):
        SignatureDB.model_validate(base)
    del base["cause_words"][-1]
    base["error_line"] = dict(base["error_line"], not_marker="(unclosed")
    with pytest.raises(ValidationError, match="bad regex"):
        SignatureDB.model_validate(base)
