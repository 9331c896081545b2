"""How model names are compared: normalisation, and the quant a repo-id suffix (``-NVFP4``) names."""

from __future__ import annotations

import re

QUANT_SUFFIX = re.compile(r"[-_.](nvfp4|fp4|fp8(?:-dynamic|-block)?|mxfp4|w4a16|awq|gptq|int4|bf16)$", re.I)
SUFFIX_QUANT = {
    "nvfp4": "nvfp4",
    "fp4": "nvfp4",
    "fp8": "fp8",
    "fp8-dynamic": "fp8",
    "fp8-block": "fp8_block",
    "mxfp4": "mxfp4",
    "w4a16": "int4_w4a16",
    "awq": "int4_w4a16",
    "gptq": "int4_w4a16",
    "int4": "int4_w4a16",
    "bf16": "bf16",
}
# the quant of a profile's ``hf_repo_ids`` group
HF_KEY_QUANT = {"nvfp4": "nvfp4", "fp4": "nvfp4", "nvidia_fp4": "nvfp4", "fp8": "fp8", "bf16": "bf16"}


def norm(text: str) -> str:
    """The form names are compared in: stripped, lower case, ``_`` as ``-``."""
    return text.strip().lower().replace("_", "-")


def model_key(name: str) -> str:
    """A model name as reports and profiles are matched: no organisation, no quant suffix
    (``MrVolts/Qwen3-30B-A3B-Thinking-2507-NVFP4`` -> ``qwen3-30b-a3b-thinking-2507``)."""
    key = norm(name.rsplit("/", 1)[-1])
    while (m := QUANT_SUFFIX.search(key)) is not None and m.start() > 0:
        key = key[: m.start()]
    return key
