"""Name lookup over the packaged model profiles without pydantic (the fast ``recommend`` path).

``probe.catalog.models`` validates the same files with pydantic; this module only reads JSON.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from importlib import resources
from typing import Any

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
HF_KEY_QUANT = {"nvfp4": "nvfp4", "fp4": "nvfp4", "nvidia_fp4": "nvfp4", "fp8": "fp8", "bf16": "bf16"}


def norm(text: str) -> str:
    return text.strip().lower().replace("_", "-")


@functools.cache
def raw_profiles() -> tuple[tuple[str, dict[str, Any]], ...]:
    """(file name, parsed JSON) for every packaged profile, sorted by file name."""
    folder = resources.files("probe.data").joinpath("models")
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            out.append((entry.name, json.loads(entry.read_text(encoding="utf-8"))))
    return tuple(out)


def profile_names(data: dict[str, Any]) -> list[str]:
    ids = [i for ids in (data.get("hf_repo_ids") or {}).values() for i in ids]
    return [data["name"], data["slug"], *data.get("aliases", []), *ids]


def find(text: str) -> tuple[dict[str, Any], str | None] | None:
    """(profile JSON, quant override or None) for a name / alias / slug / HF id, or None."""
    key = norm(text)
    org_less = key.split("/", 1)[1] if "/" in key else key
    profiles = [d for _, d in raw_profiles()]
    for candidate in (key, org_less):
        for data in profiles:
            if candidate in {norm(n) for n in profile_names(data)}:
                hf_key = next(
                    (
                        k
                        for k, ids in (data.get("hf_repo_ids") or {}).items()
                        if candidate in {norm(i) for i in ids}
                    ),
                    None,
                )
                return data, HF_KEY_QUANT.get(hf_key or "")
    m = QUANT_SUFFIX.search(org_less)
    if m:
        base = org_less[: m.start()]
        for data in profiles:
            names = {norm(n) for n in profile_names(data)}
            if base in names or base in {n.split("/")[-1] for n in names}:
                return data, SUFFIX_QUANT[m.group(1).lower()]
    return None


def closest_names(text: str, n: int = 5) -> list[str]:
    pool: dict[str, str] = {}
    for _, data in raw_profiles():
        for name in [data["name"], *data.get("aliases", [])]:
            pool[norm(name)] = name
    return [pool[k] for k in difflib.get_close_matches(norm(text), list(pool), n=n, cutoff=0.4)]
