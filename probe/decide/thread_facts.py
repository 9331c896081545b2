"""What an issue thread states, read from its text: the reporter's GPUs, package versions, the backend vLLM
said it used, the kind of kernel the thread is about, and the failure its prose names when no pasted log
line does.

A thread is the title, the description (the reporter's own post, with its environment block) and the
comments, in the layout ``probe report import`` writes (``author · description · date`` /
``author · comment · date`` headers); text without those headers is all description. The reporter's own
facts come first: the environment block's ``GPU`` lines, then GPU names in the title and description, then
``sm_NN`` spellings (an ``sm_90`` in an error message is usually the kernel's requirement, not the
reporter's GPU), and the comments only when the description names nothing.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from probe.catalog.gpus import catalog

_COMMENT = re.compile(r"^\S+ · comment · \d{4}-\d\d-\d\d", re.M)
_VENDOR = re.compile(r"^(?:NVIDIA|GeForce|Tesla|Quadro|Jetson)\s+", re.I)
_SM = re.compile(r"\bsm_?(\d{2,3})[af]?\b|compute capability[ :]+(\d{1,2})\.(\d)", re.I)
_ENV_GPU = re.compile(r"^[\s>*|`-]*(?:\*\*)?GPU\b", re.I)


@dataclass(frozen=True)
class Thread:
    """A thread split into the parts a reader trusts in turn."""

    title: str
    description: str
    comments: str


def split_thread(text: str, title: str | None = None) -> Thread:
    """The title (given, else the first ``#`` heading or the first non-empty line), the description and
    the comments."""
    m = _COMMENT.search(text)
    head, tail = (text[: m.start()], text[m.start() :]) if m else (text, "")
    heading = re.search(r"^# (.+)\n", head, re.M)
    if heading is None and title is None:  # the first non-empty line is the title
        heading = re.search(r"^[ \t]*(\S.*)(?:\n|$)", head, re.M)
    if heading is not None:
        title = title or heading.group(1)
        head = head[: heading.start()] + head[heading.end() :]
    return Thread((title or "").strip(), head, tail)


@functools.cache
def _gpu_names() -> list[tuple[re.Pattern[str], int, bool]]:
    """(pattern, sm, is a family word) for every catalog name and alias: a name matches without its
    vendor prefix, with or without the space between letters and digits (``RTX 5090``, ``rtx5090``), and
    after a count (``8xH200``)."""
    out = []
    for g in catalog().gpus:
        names = {_VENDOR.sub("", n) for n in (*g.names, *g.aliases)}
        for name in sorted(names, key=len, reverse=True):
            if len(name) < 3:
                continue
            body = r"[\s-]?".join(re.escape(part) for part in re.split(r"[\s-]+", name))
            body = re.sub(r"([A-Za-z])(\d)", r"\1[\\s-]?\2", body) if " " not in name else body
            family = name.isalpha() and name.lower() not in {"thor", "spark", "rubin"}
            out.append((re.compile(rf"(?:(?<![\w-])|(?<=\dx))(?:{body})(?![\w-])", re.I), g.sm, family))
    return out


def _named_gpus(text: str) -> tuple[list[int], list[int]]:
    """(product-named GPUs, family words) the text names, in order of first appearance."""
    hits: list[tuple[int, int, bool]] = []
    for rx, sm, family in _gpu_names():
        hits += [(m.start(), sm, family) for m in rx.finditer(text)]
    hits.sort()
    named = list(dict.fromkeys(sm for _, sm, fam in hits if not fam))
    return named, list(dict.fromkeys(sm for _, sm, fam in hits if fam))


def _sm_spellings(text: str) -> list[int]:
    found = []
    for m in _SM.finditer(text):
        found.append(int(m.group(1)) if m.group(1) else int(m.group(2)) * 10 + int(m.group(3)))
    known = {g.sm for g in catalog().gpus}
    return [sm for sm in dict.fromkeys(found) if sm in known]


def gpus_in(thread: Thread) -> list[int]:
    """The reporter's GPUs (compute capabilities), by the order of trust in the module docstring."""
    env = "\n".join(ln for ln in thread.description.splitlines() if _ENV_GPU.match(ln))
    for part in (env, f"{thread.title}\n{thread.description}", thread.comments):
        named, family = _named_gpus(part)
        if named:
            return named
        spelled = _sm_spellings(part)
        if spelled:
            return spelled
        if family:
            return family
    return []


#: how threads spell a package -> the report's package name
_PACKAGE_SPELLINGS = {
    "vllm": "vllm", "vllm-openai": "vllm", "sglang": "sglang", "flashinfer": "flashinfer",
    "flashinfer-python": "flashinfer", "flashinfer_python": "flashinfer", "pytorch": "torch",
    "torch": "torch", "triton": "triton", "tensorrt-llm": "tensorrt_llm", "tensorrt_llm": "tensorrt_llm",
    "trtllm": "tensorrt_llm", "flash-attn": "flash_attn", "flash_attn": "flash_attn",
    "transformers": "transformers", "cuda runtime": "cuda", "cuda": "cuda", "cuda driver": "driver",
    "nvidia driver": "driver", "driver": "driver", "nvidia-smi driver": "driver",
}  # fmt: skip
_NAMES = "|".join(sorted((re.escape(n) for n in _PACKAGE_SPELLINGS), key=len, reverse=True))
_VERSION_AT = re.compile(
    rf"(?<![\w-])(?P<name>{_NAMES})(?![\w-])(?:\s+version)?(?:\s+used to build \w+)?"
    r"[\s*`'\"]*(?:==|:|=|\s|/\w+:)?[\s*`'\"]*v?(?P<v>\d+\.\d+(?:\.\d+)?(?:[\w.+-]*\w)?)",
    re.I,
)
_NVCC = re.compile(r"Cuda compilation tools, release (\d+\.\d+)")
_SHAPE = {"driver": re.compile(r"^\d{3}\.\d+"), "cuda": re.compile(r"^1[0-3]\.\d")}


def versions_in(text: str) -> dict[str, str]:
    """The first plausible version the text states per package (``name: 1.2.3``, ``name==1.2.3``,
    ``name version 1.2.3``, ``org/name:v1.2.3``, nvcc's ``release 12.9``)."""
    out: dict[str, str] = {}
    for m in _VERSION_AT.finditer(text):
        pkg = _PACKAGE_SPELLINGS[m.group("name").lower()]
        v = re.sub(r"-(?:cu|cuda|rocm|py)\d[\w.]*$", "", m.group("v"))  # a container tag's build suffix
        shape = _SHAPE.get(pkg)
        runtime = m.group("name").lower() == "cuda runtime"  # beats "CUDA used to build PyTorch"
        if (
            (pkg not in out or runtime)
            and (shape is None or shape.match(v))
            and (pkg == "driver" or not _SHAPE["driver"].match(v))
        ):
            out[pkg] = v
    nvcc = _NVCC.search(text)
    if nvcc and "cuda" not in out:
        out["cuda"] = nvcc.group(1)
    return out


_ATTENTION = (
    re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z_0-9]+) (?:attention )?backend"),
    re.compile(r"attention backend\s*(?:=|:|is)\s*'?([A-Z][A-Z_0-9]+)"),
)
_FA = re.compile(r"Using FlashAttention version (\d)")
_MOE = (
    re.compile(r"Using '?([A-Za-z][A-Za-z0-9_ ]*?)'? (?:\w+ )?MoE backend"),
    re.compile(r"\b(Marlin|Triton|Cutlass|FlashInfer|TrtLlm|DeepGemm)\w*Experts\b"),
    re.compile(r"backend selected by vLLM:\s*([A-Z_]+)"),
)
_EXPERTS = {"marlin": "marlin", "triton": "triton", "cutlass": "cutlass", "flashinfer": "flashinfer_cutlass",
            "trtllm": "flashinfer_trtllm", "deepgemm": "deep_gemm"}  # fmt: skip


def backend_in(text: str) -> tuple[str | None, str | None, int | None]:
    """(kind, backend, FA version) vLLM's log says it used: a MoE backend first (an MoE report names it),
    else an attention backend."""
    for rx in _MOE:
        m = rx.search(text)
        if m:
            name = m.group(1).strip().lower().replace(" ", "_")
            return "moe", _EXPERTS.get(name, name.removesuffix("_wna16")), None
    for rx in _ATTENTION:
        m = rx.search(text)
        if m:
            fa = _FA.search(text)
            return "attention", m.group(1), int(fa.group(1)) if fa and m.group(1) == "FLASH_ATTN" else None
    return None, None, None


#: words that say which kernels a sentence is about, in the order they are trusted
_KIND_WORDS = (
    ("moe", re.compile(
        r"(?<![a-z])MoE(?! model)|Moe(?=[A-Z_])|"
        r"(?i:\bmoe_|_moe\b|experts?\b|grouped[ _-]?gemm|marlin|deep_?gemm)")),
    ("attention", re.compile(
        r"attention|\battn|flash[ _-]?attn|\bFA[234]\b|fmha|\bMLA\b|kv[ _-]cache|sinks|"
        r"flashinfer[ _](?:prefill|decode)|paged", re.I)),
    ("other", re.compile(
        r"norm\b|rmsnorm|layernorm|rope\b|rotary|sampler|sampling kernel|all[ _-]?reduce", re.I)),
)  # fmt: skip


def _bug_prose(description: str, lines: int = 4) -> str:
    """The first prose lines the reporter wrote about the bug (after a "Describe the bug" heading when
    there is one; code blocks and the environment block left out)."""
    at = re.search(r"describe the bug.*\n", description, re.I)
    body = description[at.end() :] if at else description
    out, fenced = [], False
    for ln in body.splitlines():
        if ln.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and ln[:1].isalpha() and not re.match(r"\w+ · \w+ · |Traceback|\w+Error\b", ln):
            out.append(ln)
            if len(out) == lines:
                break
    return "\n".join(out)


def kind_in(thread: Thread, log_line: str | None, backend_kind: str | None, failed: bool) -> str:
    """The kind of kernel a thread is about: the title's words, the decisive log line's, the backend the
    log names; a failure named by none of them is the engine's (``other`` when nothing failed)."""
    title = re.sub(r"^\s*(?:\[[^\]]*\]\s*:?\s*)+", "", thread.title)
    if len(title) < 8:  # an empty "[Bug]:" title: the description's first lines stand in
        title = " ".join(thread.description.split("\n", 12)[:12])
    for text in (title, log_line or "", _bug_prose(thread.description)):
        for kind, rx in _KIND_WORDS:
            if rx.search(text):
                return kind
    return backend_kind or ("engine" if failed else "other")
