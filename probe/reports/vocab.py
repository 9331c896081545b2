"""The words a field report is written in: kinds, backends, quants, features, outcomes, packages.

Standard library only (``recommend`` reads the report base on its start-up path). Backend names are
probe's own: ``--moe-backend`` values and vLLM's attention enum names (the backend catalog,
``probe/data/backends.json``: its records and the names it does not cover), and short
lowercase names for dense GEMM, sampler, communication and compile kernels. :func:`backend_family`
groups them for the coverage table.
"""

from __future__ import annotations

import functools
import re

from probe.catalog.backends import catalog
from probe.outcomes import Outcome
from probe.versions import version_key

#: a report's fields, in the order files are written in (docs/reports.md)
FIELDS = (
    "id", "source", "also", "citation", "date", "seen_in", "gpus", "gpu_names", "kind", "backend",
    "fa_version", "quant", "features", "models", "model_specific", "versions", "versions_text",
    "introduced_in", "fixed_in", "last_affected", "open_as_of", "outcome", "symptom", "root_cause",
    "workaround", "works_with", "log_line", "checked", "phase", "exit_code", "shape", "timings",
)  # fmt: skip

KINDS = ("moe", "attention", "engine", "gemm", "sampler", "comm", "compile", "other")

#: probe's outcomes without ``skipped``, plus ``degraded``: it ran, but much slower (or on a fallback)
OUTCOMES = (*(o.value for o in Outcome if o is not Outcome.SKIPPED), "degraded")

#: failures that are a property of GPU x backend x quant (x features), not of one model's shape: a
#: new report of one of these generalises to every model that matches unless it says otherwise
#: (``model_specific``); a crash, a hang, wrong output or a slowdown is tied to the models it was seen
#: on until a reviewer marks it general (scripts/import_reports.py, docs/reports.md)
GENERAL_OUTCOMES = ("unsupported", "no_kernel_image", "jit_failed", "import_error", "kernel_init_failed")

#: the software stack a report was seen in. vLLM runs FlashInfer's and DeepGEMM's own wheels, so
#: their reports speak for vLLM as they are; the other stacks build their own binaries and gates
#: (SGLang's sgl-kernel, TensorRT-LLM, the standalone flash-attn / FlashMLA / CUTLASS builds), so
#: only how a shared kernel behaves carries over, not whether their build had code or accepted a GPU
STACKS = (
    "vllm",
    "flashinfer",
    "deep_gemm",
    "sglang",
    "tensorrt_llm",
    "flash_attn",
    "flashmla",
    "cutlass",
    "other",
)
SHARES_BINARIES_WITH_VLLM = ("vllm", "flashinfer", "deep_gemm")
BUILD_OUTCOMES = ("no_kernel_image", "import_error", "jit_failed", "unsupported")
REPOS = {
    "vllm-project/vllm": "vllm",
    "flashinfer-ai/flashinfer": "flashinfer",
    "deepseek-ai/DeepGEMM": "deep_gemm",
    "sgl-project/sglang": "sglang",
    "NVIDIA/TensorRT-LLM": "tensorrt_llm",
    "Dao-AILab/flash-attention": "flash_attn",
    "deepseek-ai/FlashMLA": "flashmla",
    "NVIDIA/cutlass": "cutlass",
}

#: probe's quant names (``probe.catalog.quants``) + formats no profile uses yet
QUANTS = ("bf16", "fp16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4_w4a16", "int8", "w4a8", "mxfp8")
QUANT_ALIASES = {"int4": "int4_w4a16", "w4a16": "int4_w4a16", "fp8_blockscale": "fp8_block"}

_NAMED = {
    "gemm": (
        "cutlass_scaled_mm",
        "flashinfer_fp4_gemm",
        "flashinfer_fp8_gemm",
        "flashinfer_fp8_blockscale_gemm",
        "flashinfer_trtllm_gen_gemm",
        "trtllm_fp8_blockscale_gemm",
        "marlin_gemm",
        "machete",
        "deep_gemm_linear",
        "cublas",
        "cudnn_matmul",
        "triton_gemm",
    ),
    "sampler": ("flashinfer_sampler", "torch_sampler"),
    "comm": ("custom_allreduce", "nccl", "pynccl", "deepep", "flashinfer_allreduce"),
    "compile": ("inductor", "triton_jit", "cuda_graphs"),
}
_OTHER_NAME = re.compile(r"^[a-z][a-z0-9_]{1,60}$")

#: feature -> (role, type). ``model``: a fact of the model (checked against its profile); ``setting``:
#: something a user turns on (a report that needs it does not rule a backend out for the default
#: set-up); ``setup``: how the reporter ran it (informational). Integers may be written as a bound
#: (``">1"``, ``">=3"``).
FEATURES: dict[str, tuple[str, type]] = {
    "head_size": ("model", int),
    "sinks": ("model", bool),
    "mla": ("model", bool),
    "sparse": ("model", bool),
    "activation": ("model", str),
    "sliding_window": ("model", bool),
    "softcap": ("model", bool),
    "alibi": ("model", bool),
    "non_causal": ("model", bool),
    "kv_cache_dtype": ("setting", str),
    "spec_decode": ("setting", str),
    "ep": ("setting", bool),
    "dp": ("setting", int),
    "pp": ("setting", int),
    "dcp": ("setting", int),
    "lora": ("setting", bool),
    "dtype": ("setting", str),
    "tp": ("setup", int),  # the reporter's set-up; a bound (">1") is a condition: it needs TP above 1
    "num_speculative_tokens": ("setup", int),
    "trtllm_attention": ("setup", bool),
    "cascade_attention": ("setup", bool),
    "cuda_graphs": ("setting", bool),  # False: eager mode (vLLM's --enforce-eager)
    "autotune": ("setting", bool),  # FlashInfer's kernel autotuner (vLLM runs it at start-up)
    "prefix_caching": ("setup", bool),
    "chunked_prefill": ("setup", bool),
    "max_model_len": ("setup", int),
    "max_num_seqs": ("setup", int),
}
#: a setting's value in vLLM's default set-up (a report at that value needs nothing turned on)
SETTING_DEFAULTS: dict[str, object] = {
    "kv_cache_dtype": "auto",
    "ep": False,
    "dp": 1,
    "pp": 1,
    "dcp": 1,
    "lora": False,
    "dtype": "bf16",
    "cuda_graphs": True,
    "autotune": True,
}
#: model facts a speculative-decoding method adds to the deployment through its drafter: DFlash's
#: block-diffusion drafter runs non-causal attention beside the causal target model
SPEC_DRAFT_FEATURES: dict[str, dict[str, object]] = {
    "dflash": {"non_causal": True},
}
BOUND = re.compile(r"^(>=|<=|>|<)(\d+)$")

#: packages a report may name versions of
PACKAGES = (
    "vllm",
    "flashinfer",
    "torch",
    "cuda",
    "driver",
    "triton",
    "flash_attn",
    "flash_attn_4",
    "sglang",
    "tensorrt_llm",
    "tensorrt",
    "cutlass",
    "cutlass_dsl",
    "deep_gemm",
    "transformers",
    "jetpack",
)
PACKAGE_ALIASES = {"trtllm": "tensorrt_llm", "flash-attn": "flash_attn", "nvidia-cutlass-dsl": "cutlass_dsl"}
#: matrix provenance keys -> report packages (``gate``, ``recommend``)
PROVENANCE_PACKAGES = {
    "vllm": "vllm",
    "flashinfer": "flashinfer",
    "torch": "torch",
    "torch_cuda": "cuda",
    "driver": "driver",
    "triton": "triton",
    "flash_attn": "flash_attn",
}


@functools.cache
def backends(kind: str) -> frozenset[str]:
    """The backend names of one kind: the backend catalog's records and the exact names it does not
    cover (MoE, attention), or probe's short names (empty for ``other``: any short lowercase name)."""
    if kind in ("moe", "attention"):
        cat = catalog()
        exact = {n.name for n in cat.not_covered if n.kind == kind and n.name}
        return frozenset(cat.names(kind)) | exact
    return frozenset(_NAMED.get(kind, ()))


def _known(kind: str, backend: str) -> bool:
    """A name of ``kind``: listed, or matched by a pattern the backend catalog does not cover."""
    if backend in backends(kind):
        return True
    return kind in ("moe", "attention") and catalog().gap(kind, backend) is not None


def backend_problem(kind: str, backend: str) -> str | None:
    """Why ``backend`` is not a name of ``kind`` (None: it is). An engine report names its MoE
    backend, its attention backend, or both as ``moe+ATTENTION``."""
    if kind == "engine":
        bad = [p for p in backend.split("+") if not (_known("moe", p) or _known("attention", p))]
        return f"engine backend parts {bad} are neither MoE nor attention backends" if bad else None
    if kind == "other":
        return None if _OTHER_NAME.match(backend) else f"{backend!r} is not a short lowercase name"
    if not _known(kind, backend):
        return f"{backend!r} is not a {kind} backend (known: {', '.join(sorted(backends(kind)))})"
    return None


#: the coverage table's columns: the backend catalog's families, then dense GEMM and the rest
FAMILY_ORDER = (
    "Marlin MoE", "CUTLASS MoE", "FlashInfer MoE", "Triton MoE", "DeepGEMM MoE", "other MoE", "MLA",
    "FlashAttention", "FlashInfer attention", "Triton attention", "FlexAttention", "other attention",
    "dense GEMM", "sampler / comm / compile / other",
)  # fmt: skip


def backend_family(kind: str, backend: str) -> str:
    """The column of the coverage table a report counts in (an engine report: its MoE backend's,
    else its attention backend's): the backend catalog's ``family`` of the name."""
    if kind == "engine":
        first = backend.split("+")[0]
        return backend_family("moe" if first in backends("moe") else "attention", first)
    if kind == "gemm":
        return "dense GEMM"
    if kind not in ("moe", "attention"):
        return FAMILY_ORDER[-1]
    cat = catalog()
    rec = cat.find(kind, backend)
    gap = cat.gap(kind, backend) if rec is None else None
    family = rec.family if rec else gap.family if gap else None
    return family or f"other {'MoE' if kind == 'moe' else 'attention'}"


def normal_quant(quant: str | None) -> str | None:
    """A quant as probe names it (``int4`` -> ``int4_w4a16``); None stays None."""
    return None if quant is None else QUANT_ALIASES.get(quant, quant)


def exact_version(package: str, text: str) -> bool:
    """A version a range can use: a full version string (``0.11.0``, ``0.19.1rc1.dev231+g9dd5ee011``,
    ``2.11.0a0+nv26.3``), not a branch (``13``, ``0.6.x``, ``main``, ``nightly+g…``) nor the
    ``0.1.devN`` an untagged vLLM source build calls itself."""
    key = version_key(text)
    if key is None:
        return False
    return not (package == "vllm" and key[0][:2] == (0, 1))


def feature_problem(name: str, value: object) -> str | None:
    """Why a feature entry is not valid (None: it is)."""
    if name not in FEATURES:
        return f"unknown feature {name!r} (known: {', '.join(FEATURES)})"
    typ = FEATURES[name][1]
    if typ is int and isinstance(value, str) and BOUND.match(value):
        return None
    if typ is int and (isinstance(value, bool) or not isinstance(value, int)):
        return f"feature {name!r} takes an integer or a bound like '>1', not {value!r}"
    if typ is not int and not isinstance(value, typ):
        return f"feature {name!r} takes a {typ.__name__}, not {value!r}"
    return None


_SM = re.compile(r"^(?:sm_?)?(\d{2,3})[af]?$", re.I)
_NOTE = re.compile(r"^(?P<v>\S+)\s+\((?P<note>[^)]*)\)$")


def normal_gpu(text: str | int) -> int:
    """``sm_120`` / ``sm_120a`` / ``120`` / 120 -> 120 (``ValueError`` for anything else)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = _SM.match(str(text).strip())
    if not m:
        raise ValueError(f"not a compute capability: {text!r} (expected e.g. sm_120)")
    return int(m.group(1))


def normal_backend(kind: str, backend: str) -> tuple[str, str]:
    """(kind, backend) in probe's vocabulary: a GEMM kernel filed under ``other`` moves to ``gemm``;
    an attention name is upper-cased, a MoE / GEMM name lower-cased."""
    if kind == "attention" or (kind == "engine" and backend.upper() == backend):
        return kind, backend.upper()
    name = backend.lower() if kind != "engine" else backend
    if kind == "other" and name in backends("gemm"):
        return "gemm", name
    return kind, name


def normal_name(name: str) -> str:
    """A backend name as probe spells it, whatever kind it is of (``MARLIN_GEMM`` -> ``marlin_gemm``,
    ``flashinfer`` stays a MoE/GEMM-style name unless only the attention enum knows it)."""
    if name.upper() in backends("attention") and name.lower() not in backends("moe"):
        return name.upper()
    return name.lower() if any(name.lower() in backends(k) for k in KINDS) else name


def split_version(package: str, text: str) -> tuple[str | None, str | None]:
    """(exact version, note) of a version as a thread wrote it: ``0.6.11 (python)`` -> ('0.6.11',
    'flashinfer 0.6.11 (python)'); ``0.6.x`` / ``main`` / ``nightly+g…`` -> (None, 'vllm main')."""
    text = str(text).strip()
    m = _NOTE.match(text)
    if m and exact_version(package, m.group("v")):
        return m.group("v"), f"{package} {text}"
    if exact_version(package, text):
        return text, None
    return None, f"{package} {text}"
