# ruff: noqa: E501  (log lines are quoted whole)
"""The crash classifier: cases built from documented signatures (sources in each case; texts as
quoted in shared/reference/failure-signatures.md). The real-log corpus (tests/data/logs) is scored by
test_classify_corpus.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from probe.catalog.signatures import SignatureDB, signature_db
from probe.outcomes import Outcome
from probe.sandbox.classifier import LogScanner, classify_stream, classify_text, clean_line, strip_prefixes

ROOT = Path(__file__).resolve().parents[2]
V = "(EngineCore_DP0 pid=4242) ERROR 05-10 12:00:01 [core.py:700] "
W = "(VllmWorker TP0 pid=4300) "

CASES = [
    # (name, log, expected outcome, substring of the root cause or None, degraded)
    (
        "kv_cache_sf skew (vllm PR #40177)",
        f"{V}EngineCore failed to start.\n{V}Traceback (most recent call last):\n"
        f'{V}  File "/x/vllm/v1/attention/backends/flashinfer.py", line 900, in forward\n'
        f"{V}    prefill_wrapper.run(q, kv, kv_cache_sf=sf)\n"
        f"{V}TypeError: BatchPrefillWithPagedKVCacheWrapper.run() got an unexpected keyword argument 'kv_cache_sf'\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n",
        "api_mismatch",
        "unexpected keyword argument 'kv_cache_sf'",
        False,
    ),
    (
        "Thor libcuda symbol (downstream Thor docs)",
        'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
        "ImportError: /usr/local/lib/python3.12/dist-packages/vllm/_C.abi3.so: undefined symbol: cuPointerGetAttribute\n",
        "import_error",
        "undefined symbol: cuPointerGetAttribute",
        False,
    ),
    (
        "fatal TMA WS init on GB10 (R3)",
        f"{W}[TensorRT-LLM][ERROR] Assertion failed: Failed to initialize cutlass TMA WS grouped gemm. Error: Error "
        "Internal (cutlass_kernel_file_gemm_grouped_sm120_M128_BS_group2.generated.cu:60)\n"
        f"{V}EngineCore failed to start.\n",
        "kernel_init_failed",
        "Failed to initialize cutlass TMA WS grouped gemm",
        False,
    ),
    (
        "autotuner skips tactics, run goes on (R1, NVIDIA/cutlass#3096)",
        f"{W}2026-01-01 10:00:00,001 - WARNING - autotuner.py:485 - flashinfer.jit: [Autotuner]: Skipping tactic "
        "<MoERunner> 14, due to failure while profiling: [TensorRT-LLM][ERROR] Assertion failed: Failed to initialize "
        "cutlass TMA WS grouped gemm. Error: Error Internal (x.generated.cu:60)\n"
        f"{W}INFO 01-01 10:00:09 [gpu_model_runner.py:2000] Model loading took 12.1 GiB\n",
        "ok",
        None,
        True,
    ),
    (
        "default MoE config is not the cause (vllm#32347)",
        "WARNING 03-01 01:00:00 [fused_moe.py:668] Using default MoE config. Performance might be sub-optimal! "
        "Config file not found at /x/E=16,N=1536,device_name=NVIDIA_H100_80GB_HBM3.json\n"
        f"{V}WorkerProc hit an exception.\n"
        "ValueError: Selected backend FLASHMLA is not valid for this configuration. Reason: "
        "['compute capability not supported']\n",
        "unsupported",
        "Selected backend FLASHMLA is not valid",
        False,
    ),
    (
        "echoes after the first CUDA error (flashinfer#4164)",
        "WARNING 01-01 00:00:00 [marlin_utils_fp4.py:137] Your GPU does not have native support for FP4 computation "
        "but FP4 quantization is being used.\n"
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb)`\n"
        "Warning: CUDA warning: an illegal memory access was encountered (function ~CUDAEvent)\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
        "root cause.\n",
        "device_fault",
        "torch.AcceleratorError: CUDA error: an illegal memory access",
        False,
    ),
    (
        "device-side arch message then cuBLAS echo (flashinfer#3344)",
        "This kernel only supports sm100f.\n" * 5
        + "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx(...)`\n",
        "no_kernel_image",
        "This kernel only supports sm100f",
        False,
    ),
    (
        "ANSI colours, \\r progress bar and a vLLM prefix",
        "\x1b[1;36m(EngineCore_DP0 pid=77)\x1b[0;0m INFO 05-10 12:00:00 [loader.py:10] Loading weights\n"
        "Loading safetensors checkpoint shards:   0% Completed | 0/2\rLoading safetensors checkpoint shards:  50% "
        "Completed | 1/2\rLoading safetensors checkpoint shards: 100% Completed | 2/2\n"
        "\x1b[1;36m(EngineCore_DP0 pid=77)\x1b[0;0m \x1b[0;31mERROR\x1b[0m 05-10 12:00:02 [core.py:700] "
        "RuntimeError: CUDA error: no kernel image is available for execution on the device\n",
        "no_kernel_image",
        "RuntimeError: CUDA error: no kernel image is available",
        False,
    ),
    (
        "speculative method refused (vllm-ascend#9144)",
        "(APIServer pid=1) NotImplementedError: Unsupported speculative method: 'mtp'\n",
        "unsupported",
        "Unsupported speculative method: 'mtp'",
        False,
    ),
    (
        "FA version notice at ERROR level is benign (vllm#15853)",
        "ERROR 02-01 00:00:00 [fa_utils.py:60] Cannot use FA version 2 is not supported due to FA3 is only supported "
        "on devices with compute capability >= 8 excluding 8.6 and 8.9 and Blackwell archs (>=10)\n"
        "INFO 02-01 00:00:10 [api_server.py:1000] Application shutdown complete.\n",
        "ok",
        None,
        False,
    ),
    (
        "ptxas rejects sm_121a (triton#8539)",
        "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\n"
        "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'\n",
        "jit_failed",
        "PTXAS error",
        False,
    ),
    (
        "unknown exception type falls back to its final line",
        'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\n    go()\n'
        "mylib.errors.WeirdThingError: the frobnicator is upset\n",
        "crashed",
        "WeirdThingError: the frobnicator is upset",
        False,
    ),
    (
        "missing module",
        'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\n'
        "ModuleNotFoundError: No module named 'flashinfer'\n",
        "import_error",
        "No module named 'flashinfer'",
        False,
    ),
    (
        "attribute skew",
        'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\n'
        "AttributeError: '_OpNamespace' '_C' object has no attribute 'cutlass_scaled_mm_supports_fp4'\n",
        "api_mismatch",
        "has no attribute 'cutlass_scaled_mm_supports_fp4'",
        False,
    ),
    (
        "torch OOM",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.2 GiB is free.\n",
        "oom",
        "CUDA out of memory",
        False,
    ),
    (
        "chained exceptions: the first one is the cause",
        'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\n'
        "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "b.py", line 2, in <module>\n'
        "RuntimeError: Engine core initialization failed. See root cause above.\n",
        "import_error",
        "libcudart.so.13",
        False,
    ),
    (
        "post-readiness worker death with exit 0 (vllm#48966)",
        f"{V}Worker proc VllmWorker-0 died unexpectedly, shutting down executor.\n"
        f"{V}EngineCore encountered a fatal error.\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
        "INFO:     Application shutdown complete.\n",
        "crashed",
        "Worker proc VllmWorker-0 died unexpectedly",
        False,
    ),
    (
        "NVFP4 oracle refusal (vllm#35065)",
        f"{V}NotImplementedError: No NvFp4 MoE backend supports the deployment configuration.\n",
        "unsupported",
        "No NvFp4 MoE backend supports",
        False,
    ),
    (
        "TRTLLM GEMM on the wrong arch (vllm#43906)",
        "RuntimeError: [TensorRT-LLM][ERROR] trtllm_batched_gemm_runner.cu:305: Error occurred when running GEMM! "
        "(Kernel: bmm_E2m1_sm100f)\n",
        "kernel_init_failed",
        "Error occurred when running GEMM",
        False,
    ),
    (
        "Xid in dmesg (eugr/spark-vllm-docker#308)",
        "[ 1234.5] NVRM: Xid (PCI:000f:01:00): 31, pid=4242, name=python3, Ch 00000008, intr 00000000. MMU Fault\n",
        "device_fault",
        "Xid",
        False,
    ),
    (
        "OOM killer (LMCache#4759)",
        "Out of memory: Killed process 3742074 (lmcache) total-vm:81306880kB, anon-rss:1058560kB\n",
        "oom",
        "Killed process 3742074",
        False,
    ),
    (
        "startup precheck on unified memory (Thor, 0.90)",
        "ValueError: Free memory on device (100.2/122.8 GiB) on startup is less than desired GPU memory utilization "
        "(0.9, 110.5 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n",
        "oom",
        "less than desired GPU memory utilization",
        False,
    ),
]


@pytest.mark.parametrize("name,log,outcome,cause,degraded", CASES, ids=[c[0] for c in CASES])
def test_documented_signatures(name, log, outcome, cause, degraded):
    v = classify_text(log)
    assert v.outcome.value == outcome, (v.root_cause, v.signature)
    if cause is not None:
        assert v.root_cause is not None and cause in v.root_cause, v.root_cause
    assert v.degraded == degraded, v.degraded_reasons
    if v.outcome is not Outcome.OK:
        assert v.hint


def test_prefixes_and_cleaning():
    assert strip_prefixes("(EngineCore_DP0 pid=1234) ERROR 05-10 12:00:01 [core.py:700] Boom") == "Boom"
    assert strip_prefixes("E0303 11:40:42.533000 713 site-packages/x.py:533] Traceback") == "Traceback"
    assert (
        strip_prefixes(
            "(RayWorkerWrapper pid=1, ip=10.0.0.1) [2024-07-25 10:46:00,050 E 1 1] logging.cc:440: "
            "*** SIGSEGV"
        )
        == "*** SIGSEGV"
    )
    assert clean_line("\x1b[31mred\x1b[0m") == "red"
    assert clean_line("a 10%\rb 50%\rc 100%\n") == "c 100%"


def test_runner_evidence():
    assert classify_text("", signal_name="SIGSEGV", completed=False).outcome is Outcome.CRASHED
    v = classify_text("Killed\n", signal_name="SIGKILL", completed=False)
    assert v.outcome is Outcome.OOM
    v = classify_text("", exit_code=255, completed=False)
    assert v.outcome is Outcome.CRASHED and "255" in v.root_cause
    assert classify_text("", timed_out=True, completed=False).outcome is Outcome.TIMEOUT
    # a decisive line beats the bare signal: the abort follows the real error
    v = classify_text(
        "no kernel image is available for execution on the device\nAborted (core dumped)\n",
        signal_name="SIGABRT",
        completed=False,
    )
    assert v.outcome is Outcome.NO_KERNEL_IMAGE
    # the probe's own report wins; benign lines still mark it degraded
    v = classify_text(
        "Using default MoE config. Performance might be sub-optimal!\n", reported=Outcome.OK, completed=True
    )
    assert v.outcome is Outcome.OK and v.degraded
    v = classify_text(
        "RuntimeError: CUDA error: an illegal memory access was encountered\n",
        reported=Outcome.WRONG_OUTPUT,
        completed=True,
    )
    assert v.outcome is Outcome.WRONG_OUTPUT


@pytest.mark.slow
def test_streaming_big_log_finds_early_cause():
    noise = b"INFO 01-01 00:00:00 [x.py:1] step ok\n" * 200_000
    data = (
        b"RuntimeError: CUDA error: an illegal instruction was encountered\n"
        + noise
        + b"RuntimeError: CUDA error: an illegal memory access was encountered\n"
        + b"x" * (5 << 20)
    )
    v = classify_stream(io.BytesIO(data))
    assert v.outcome is Outcome.DEVICE_FAULT and "illegal instruction" in v.root_cause
    assert v.line_number == 1
    sc = LogScanner()
    sc.feed_stream(io.BytesIO(data))
    assert sum(len(h) for h in sc.hits.values()) <= 64 * 8  # bounded bookkeeping


def _db(sigs: list[dict]) -> dict:
    base = json.loads((ROOT / "probe" / "data" / "signatures.json").read_text())
    base["signatures"] = sigs
    return base


@pytest.mark.parametrize(
    "bad",
    [
        [{"id": "a", "kind": "decisive", "regex": "x"}],  # decisive without outcome
        [{"id": "a", "kind": "decisive", "regex": "(", "outcome": "oom"}],  # bad regex
        [{"id": "a", "kind": "benign", "regex": "x", "outcome": "oom"}],  # benign with an outcome
        [
            {"id": "a", "kind": "decisive", "regex": "x", "outcome": "oom"},
            {"id": "a", "kind": "decisive", "regex": "y", "outcome": "oom"},
        ],  # duplicate id
        [{"id": "a", "kind": "decisive", "regex": "x", "outcome": "fine"}],  # not an outcome
    ],
)
def test_signature_file_is_validated(bad):
    with pytest.raises(ValidationError):
        SignatureDB.model_validate(_db(bad))


def test_packaged_signatures_load():
    db = signature_db()
    assert len(db.signatures) >= 50
    assert {s.kind for s in db.signatures} >= {"decisive", "wrapper", "echo", "benign", "degraded"}


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "probe", "classify", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def test_cli_json_from_stdin():
    p = _cli("-", "--json", stdin=b"foo\nTypeError: run() got an unexpected keyword argument 'kv_cache_sf'\n")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["outcome"] == "api_mismatch" and "kv_cache_sf" in out["root_cause"] and out["hint"]
    assert out["line_number"] == 2 and "degraded" in out and "phase" in out


@pytest.mark.slow
def test_cli_text_and_errors(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("Segmentation fault (core dumped)\n")
    p = _cli(str(log))
    assert p.returncode == 0 and "outcome:    crashed" in p.stdout.decode()
    p = _cli(str(tmp_path / "missing.log"))
    assert p.returncode == 6 and b"Traceback" not in p.stderr
    p = _cli("-", "--signal", "NOPE", stdin=b"")
    assert p.returncode == 2
    p = _cli("-", "--exit-code", "137", "--json", stdin=b"Killed\n")
    assert json.loads(p.stdout)["outcome"] == "oom"


def test_root_cause_drops_the_logger_prefix():
    """vLLM 0.26 on H200, Qwen3.5 without FlashInfer: the same failure logged at two different times
    must give the same root cause (diff / gate compare it)."""
    causes = set()
    for stamp in ("04:20:39", "04:21:12"):
        log = (
            f"WARNING 11-22 {stamp} [qwen_gdn_linear_attn.py:1085] ModuleNotFoundError: "
            "No module named 'flashinfer'\n"
            "Traceback (most recent call last):\n"
            '  File "/tmp/site/vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py", line 174\n'
            "ModuleNotFoundError: No module named 'flashinfer'\n"
        )
        v = classify_text(log, exit_code=1)
        assert v.outcome.value == "import_error"
        causes.add(v.root_cause)
    assert causes == {"ModuleNotFoundError: No module named 'flashinfer'"}


@pytest.mark.parametrize(
    ("line", "outcome"),
    [
        # a compiled module missing from the install (vLLM 0.26.0 slim wheel on an H200)
        (
            "ImportError: cannot import name '_vllm_fa2_C' from partially initialized module "
            "'vllm.vllm_flash_attn' (most likely due to a circular import) (/tmp/site/vllm/vllm_flash_attn/__init__.py)",
            "import_error",
        ),
        (
            "ImportError: cannot import name '_vllm_fa3_C' from 'vllm.vllm_flash_attn' (unknown location)",
            "import_error",
        ),
        # a Python name that moved between versions stays a version skew (vllm-project/vllm#16813)
        (
            "ImportError: cannot import name 'get_scheduler_metadata' from 'vllm.vllm_flash_attn'",
            "api_mismatch",
        ),
        ("ImportError: cannot import name 'abc_c' from 'pkg'", "api_mismatch"),  # `_C` is case-sensitive
    ],
)
def test_missing_compiled_module_is_an_import_error(line, outcome):
    log = f'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n{line}\n'
    v = classify_text(log, exit_code=1)
    assert v.outcome.value == outcome, v.root_cause
    assert v.root_cause is not None and "cannot import name" in v.root_cause


def test_jit_lines_mark_the_jit_phase():
    log = (
        "INFO 11-23 10:00:00 [core.py:1] Loading weights took 0.1 s\n"
        "2026-11-23 10:00:01,000 - INFO - core.py:123 - flashinfer.jit: Loading JIT ops: fused_moe_90\n"
        "[1/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c moe.cu -o moe.cuda.o\n"
    )
    scanner = LogScanner()
    scanner.feed_text(log)
    assert [p for _, p in scanner.phase_marks][-1] == "jit"
    v = scanner.verdict(timed_out=True)
    assert v.outcome is Outcome.TIMEOUT and v.phase == "jit"


# -- the decision order on the classes it must handle (one case per class, each line in the form the
# -- library prints it; the real logs behind each class are in tests/data/logs) --------------------------
TB = 'Traceback (most recent call last):\n  File "/x/y.py", line 10, in f\n    g()\n'
RULE_CASES = [
    # (name, log, outcome, rule, substring of the root cause or None)
    (
        "cuda-gdb exception report",
        "Thread 1 received signal CUDA_EXCEPTION_14, Warp Illegal Address.\n[Switching focus to CUDA kernel 0]\n",
        "device_fault",
        "fault-marker",
        "CUDA_EXCEPTION_14",
    ),
    (
        "compute-sanitizer memcheck report",
        "========= Invalid __global__ write of size 4 bytes\n=========     at unaligned_kernel()+0x70\n"
        "========= ERROR SUMMARY: 1 error\n",
        "device_fault",
        "fault-marker",
        "Invalid __global__ write",
    ),
    (
        "dmesg Xid",
        "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 13, pid=2214, Graphics SM Warp Exception\n",
        "device_fault",
        "fault-marker",
        "NVRM: Xid",
    ),
    (
        "kernel segfault note",
        "python3[4242]: segfault at 0 ip 00007f3a sp 00007ffd error 4 in libcuda.so.1[7f3a+1000]\n",
        "crashed",
        "fault-marker",
        "segfault at 0",
    ),
    (
        "a stated cause beats the fault marker after it",
        "RuntimeError: CUDA error: out of memory\nSegmentation fault (core dumped)\n",
        "oom",
        "stated-cause",
        "out of memory",
    ),
    (
        "a GPU fault marker beats an exception no rule explains",
        "========= Invalid __global__ read of size 4 bytes\nRuntimeError: kernel run failed\n",
        "device_fault",
        "fault-marker",
        "Invalid __global__ read",
    ),
    (
        "cuBLAS cannot allocate its workspace",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n",
        "oom",
        "stated-cause",
        "CUBLAS_STATUS_ALLOC_FAILED",
    ),
    (
        "FlashInfer workspace overflow, message wrapped",
        "RuntimeError: Error in function 'aligned_alloc' at include/flashinfer/allocator.h:49:\n"
        "  Buffer overflow when allocating memory for batch_prefill_tmp_v\n",
        "oom",
        "stated-cause",
        "Buffer overflow when allocating",
    ),
    (
        "Triton shared-memory limit",
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, "
        "Hardware limit: 65536.\n",
        "kernel_init_failed",
        "stated-cause",
        "out of resource: shared memory",
    ),
    (
        "a torch custom op called with another schema",
        "RuntimeError: _C::rms_norm() is missing value for argument 'epsilon'. Declaration: "
        "_C::rms_norm(Tensor(a!) result, Tensor input, Tensor weight, float epsilon) -> ()\n",
        "api_mismatch",
        "stated-cause",
        "is missing value for argument",
    ),
    (
        "a refusal in any exception type",
        "flashinfer.jit.core.CompilationContextError: No supported CUDA architectures found for major "
        "versions [12].\n",
        "unsupported",
        "stated-cause",
        "No supported CUDA architectures",
    ),
    (
        "a capability requirement",
        "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0.\n",
        "unsupported",
        "stated-cause",
        "Bfloat16",
    ),
    (
        "a bare assertion on the shape: its source line is the message",
        TB.replace("g()", "assert head_dim in (64, 128, 256)") + "AssertionError\n",
        "unsupported",
        "stated-cause",
        "assert head_dim in (64, 128, 256)",
    ),
    (
        "an exception logged in its repr form",
        "ERROR 03-19 11:54:51 [engine.py:158] AssertionError('Only FlashAttention backend is supported.')\n",
        "unsupported",
        "stated-cause",
        "Only FlashAttention backend",
    ),
    (
        "a dependency below its minimum version",
        "Exception: flashinfer_python is installed with version 0.6.3, which is less than the minimum "
        "required version 0.6.4.\n",
        "api_mismatch",
        "stated-cause",
        "minimum required version",
    ),
    (
        "a library the loader cannot load (Windows)",
        TB + "OSError: [WinError 127] The specified procedure could not be found\n",
        "import_error",
        "stated-cause",
        "WinError 127",
    ),
    (
        "a float error bound checked by a test",
        "E       AssertionError: assert 3.92578125 <= (2 * 0.001953125)\n",
        "wrong_output",
        "stated-cause",
        "assert 3.92578125",
    ),
    (
        "an exception no rule explains is crashed, and names itself",
        TB + "KeyError: 'model.layers.0.mlp'\nSegmentation fault (core dumped)\n",
        "crashed",
        "fault-marker",
        "Segmentation fault",
    ),
    (
        "generated text of one symbol",
        "Prompt: 'Hello, my name is', Generated text: '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'\n",
        "wrong_output",
        "garbage-output",
        "!!!!",
    ),
    (
        "a short answer that is one letter repeated",
        ">>> Why is the sky blue?\nGGGGGGGGGGGGGGGGGGGGGGGG\n",
        "wrong_output",
        "garbage-output",
        "GGGG",
    ),
    (
        "generated text of one special token",
        "<|reserved_special_token_0|><|reserved_special_token_0|><|reserved_special_token_0|>"
        "<|reserved_special_token_0|>\n",
        "wrong_output",
        "garbage-output",
        "reserved_special_token_0",
    ),
    (
        "a sanitizer report indented by a CI log is still a fault marker",
        "  ========= COMPUTE-SANITIZER\n  ========= Invalid __global__ read of size 4 bytes\n",
        "device_fault",
        "fault-marker",
        "Invalid __global__ read",
    ),
    (
        "a GSP firmware failure reported by the driver",
        "NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out\n"
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)\n",
        "device_fault",
        "fault-marker",
        "GSP RM heartbeat timed out",
    ),
    (
        "a native assertion that states a refusal",
        "[F] [TRT] Assertion failed: Unsupported SM.\nC:\\source\\rtSafe\\cuda\\caskUtils.cpp:80\nAborting...\n",
        "unsupported",
        "stated-cause",
        "Assertion failed: Unsupported SM.",
    ),
    (
        "a glibc assertion on the shape",
        "python: /w/gemm.cuh:120: void run(): Assertion `head_dim % 64 == 0' failed.\nAborted (core dumped)\n",
        "unsupported",
        "stated-cause",
        "Assertion `head_dim % 64 == 0' failed",
    ),
    (
        "a TensorRT-LLM assertion on an internal invariant is no kernel refusal",
        "[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] Assertion "
        "failed: mNextBlocks.empty() (/src/cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:256)\n",
        "crashed",
        "unexplained-exception",
        "mNextBlocks.empty()",
    ),
    (
        "a pytest summary line is the exception it names",
        "FAILED tests/kernels/test_attn.py::test_decode[80-bf16] - NotImplementedError: head size 80 is not "
        "supported\n==== 1 failed, 41 passed in 12.31s ====\n",
        "unsupported",
        "stated-cause",
        "head size 80 is not supported",
    ),
    (
        "the line after a benign context that ends in ':' is its quoted message",
        "[Autotuner]: Skipping tactic 15 due to failure while profiling:\n"
        "[TensorRT-LLM][ERROR] Failed to initialize cutlass TMA WS grouped gemm\nINFO 01-01 00:00:01 model loaded\n",
        "ok",
        "no-failure",
        None,
    ),
    (
        "a builder that skips a tactic goes on",
        "[V] [TRT] LegacySASSConvolution has no valid tactics for this config, skipping\n",
        "ok",
        "no-failure",
        None,
    ),
    (
        "Triton's resource check worded as an OutOfMemoryError",
        "No valid triton configs. OutOfMemoryError: out of resource: triton_mm Required: 327680 Hardware "
        "limit:232448 Reducing block sizes or `num_stages` may help.\n",
        "kernel_init_failed",
        "stated-cause",
        "Required: 327680",
    ),
    (
        "a kernel op returning a CUDA error that names no fault",
        "tvm.error.InternalError: Check failed: (status == cudaSuccess) is false:\n"
        "  BatchPrefillWithPagedKVCache failed with error invalid resource handle\n",
        "kernel_init_failed",
        "stated-cause",
        "failed with error invalid resource handle",
    ),
    (
        "an arch expectation the GPU does not meet",
        "cutlass.cute.nvgpu.common.OpError: OpError: expects arch to be one of ['sm_120a'], but got Arch.sm_121a\n",
        "unsupported",
        "stated-cause",
        "expects arch",
    ),
    (
        "a build whose CMake configuration fails",
        "      CMake Error at /tmp/torch/share/cmake/select_compute_arch.cmake:231 (message):\n"
        "        arch_bin wasn't set for some reason\n",
        "jit_failed",
        "wrapper",
        "CMake Error at",
    ),
    (
        "an attribute missing on None is no version skew",
        TB + "AttributeError: 'NoneType' object has no attribute 'cpu'\n",
        "crashed",
        "unexplained-exception",
        "'NoneType' object has no attribute 'cpu'",
    ),
    (
        "generated text looping on one sentence",
        "Generated text: ' I like it. " + "We are going to the sea and we are happy. " * 5 + "'\n",
        "wrong_output",
        "garbage-output",
        "Generated text",
    ),
    (
        "an exception that states no cause, raised inside a JIT loader",
        "Traceback (most recent call last):\n"
        '  File "/env/deep_gemm/jit/runtime.py", line 53, in __call__\n'
        "    assert len(kernel_names) == 1, f'Too many kernels in the library: {kernel_names}'\n"
        "AssertionError: Too many kernels in the library: ['_Z6kernelv', '__assertfail']\n",
        "jit_failed",
        "stated-cause",
        "Too many kernels in the library",
    ),
    (
        "the same exception raised outside a JIT is unexplained",
        "Traceback (most recent call last):\n"
        '  File "/env/app/runner.py", line 53, in __call__\n'
        "    assert len(kernel_names) == 1\n"
        "AssertionError: Too many kernels in the library\n",
        "crashed",
        "unexplained-exception",
        "Too many kernels in the library",
    ),
    (
        "torch built for no arch of this GPU and no PTX to fall back on",
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
        "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n",
        "no_kernel_image",
        "fault-marker",
        "supports CUDA capabilities sm_50",
    ),
    (
        "torch with PTX of an older arch runs, degraded",
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
        "The current PyTorch install supports CUDA capabilities sm_80 sm_86 sm_90 compute_90.\n",
        "ok",
        "no-failure",
        None,
    ),
    (
        "a log that just stops after a step announcement is not a hang by itself",
        "INFO 08-29 20:49:14 llm_engine.py:196] # GPU blocks: 1981, # CPU blocks: 512\n",
        "ok",
        "no-failure",
        None,
    ),
    (
        "a log that ends on a progress bar stopped below 100% is an excerpt as far as text goes",
        "Capturing CUDA graphs (decode, FULL):  79%|███████▉  | 53/67 [00:08<00:02,  3.62it/s]\n",
        "ok",
        "no-failure",
        None,
    ),
    (
        "a log that ends on engine stats with requests in flight and nothing generated",
        "INFO 08-21 14:30:43 [loggers.py:123] Engine 004: Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 0.0 tokens/s, Running: 255 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%\n",
        "timeout",
        "stall",
        "Running: 255 reqs",
    ),
    (
        "a log that ends on the program saying it waits",
        "INFO 05-28 14:44:28 [shm_broadcast.py:681] No available shared memory broadcast block found in 60 "
        "seconds. This typically happens when some processes are hanging or doing some time-consuming work.\n",
        "timeout",
        "stall",
        "No available shared memory broadcast block",
    ),
    (
        "a wait followed by progress is not a hang",
        "INFO 05-28 14:44:28 [shm_broadcast.py:681] No available shared memory broadcast block found in 60 "
        "seconds.\n[AutoTuner]: Tuning fp4_gemm:  55%|█████▌    | 12/22 [06:58<07:10, 43.03s/profile]\n",
        "ok",
        "no-failure",
        None,
    ),
]
NOT_GARBAGE = [
    "Capturing CUDA graph shapes: 100%|████████████████████████████████████████| 35/35 [00:13<00:00]",
    "==========================================================================================",
    "#0  0x0000000000000000 in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1 (0x0000000000000000)",
    "tensor([0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0.])",
    "| Mandatory. |  |  |  |  |  |  |  |  |  |  |  |  |  |  |  |  |  |  |  |",
    "cudagraph_capture_sizes=[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]",
    "                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    "loss: 1.0000000000000000 at step 11500000000000001 ........................................",
    "GPUs: " + str(["NVIDIA H100 80GB HBM3"] * 8),
    "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC",
]


@pytest.mark.parametrize(
    ("name", "log", "outcome", "rule", "cause"), RULE_CASES, ids=[c[0] for c in RULE_CASES]
)
def test_decision_order_on_each_class(name, log, outcome, rule, cause):
    v = classify_text(log)
    assert (v.outcome.value, v.rule) == (outcome, rule), (v.root_cause, v.signature)
    if cause is not None:
        assert v.root_cause is not None and cause in v.root_cause, v.root_cause


@pytest.mark.parametrize("line", NOT_GARBAGE)
def test_layout_and_numbers_that_repeat_are_not_garbage(line):
    v = classify_text(f"INFO start\n{line}\nINFO done\n")
    assert v.outcome is Outcome.OK, (v.rule, v.root_cause)


def test_a_log_that_stops_is_a_timeout_only_with_the_runners_evidence():
    log = "INFO 01-31 10:27:34 model_runner.py:1115] Loading model weights took 3.7418 GB\n"
    assert classify_text(log).outcome is Outcome.OK
    v = classify_text(log, timed_out=True, completed=False)
    assert (v.outcome, v.rule) == (Outcome.TIMEOUT, "runner-timeout")


def test_cli_names_the_rule():
    p = _cli("-", "--json", stdin=b"Segmentation fault (core dumped)\n")
    out = json.loads(p.stdout)
    assert (out["outcome"], out["rule"], out["signature"]) == ("crashed", "fault-marker", "segfault")
    p = _cli("-", stdin=b"RuntimeError: CUDA error: out of memory\n")
    assert "rule:       stated-cause (signature cuda-oom)" in p.stdout.decode()


def test_decision_order_is_validated():
    base = json.loads((ROOT / "probe" / "data" / "signatures.json").read_text())
    base["decision_order"] = base["decision_order"][1:]
    with pytest.raises(ValidationError):
        SignatureDB.model_validate(base)
    base = _db([{"id": "a", "kind": "fault", "regex": "x"}])  # a fault marker needs an outcome
    with pytest.raises(ValidationError):
        SignatureDB.model_validate(base)


def test_an_exception_without_a_message_takes_the_cause_printed_below_it():
    log = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ImportError: \n"
        "[ext] CRITICAL: Could not load any ops library!\n"
        "- ImportError: /site/ext/ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi\n"
    )
    v = classify_text(log, exit_code=1)
    assert v.outcome is Outcome.IMPORT_ERROR
    assert "undefined symbol" in (v.root_cause or "")
    alone = classify_text("\n".join(log.splitlines()[:3]), exit_code=1)  # nothing below: the type decides
    assert (alone.outcome, alone.root_cause) == (Outcome.IMPORT_ERROR, "ImportError:")
