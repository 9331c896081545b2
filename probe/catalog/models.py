"""The model catalog (``probe/data/models/*.json``): profiles found by name, alias or Hugging Face id.

``find_profile(text)`` accepts a profile name / alias / Hugging Face id (``122b``,
``Qwen3.5-122B-A10B``, ``nvidia/Qwen3.5-122B-A10B-NVFP4``); a ``-NVFP4`` / ``-FP8`` suffix selects that
quant format. The profile type is :mod:`probe.catalog.profile`, the quant list :mod:`probe.catalog.quants`.
A user's model text (a profile, or a ``config.json`` / model folder / cached Hugging Face id read the way
vLLM reads it) resolves through :func:`probe.modelcfg.resolve.resolve_model`. (The engine probe's
synthetic config.json dicts: ``probe.probes.hf_config``.)
"""

from __future__ import annotations

import functools
import logging
from dataclasses import replace

from probe.catalog import datafiles
from probe.catalog.names import HF_KEY_QUANT, QUANT_SUFFIX, SUFFIX_QUANT, norm
from probe.catalog.profile import ModelProfile, profile_from_dict

# the names other packages import from here (one definition each, in the modules named above)
from probe.catalog.quants import QUANTS as QUANTS
from probe.catalog.quants import VLLM_QUANT_METHOD as VLLM_QUANT_METHOD
from probe.catalog.quants import quantization_config as quantization_config
from probe.errors import DataFileError

log = logging.getLogger(__name__)

__all__ = ["QUANTS", "VLLM_QUANT_METHOD", "ModelProfile", "find", "find_profile", "load_profiles",
           "quantization_config"]  # fmt: skip


@functools.cache
def load_profiles() -> tuple[ModelProfile, ...]:
    """All packaged profiles, sorted by file name, validated; a bad file is a bug in probe (DataFileError)."""
    profiles: list[ModelProfile] = []
    for name in datafiles.list_folder("models"):
        try:
            profiles.append(profile_from_dict(datafiles.read_json(name)))
        except ValueError as exc:
            raise DataFileError(f"packaged model profile probe/data/{name} is invalid: {exc}") from exc
    keys: dict[str, str] = {}
    for prof in profiles:
        for key in {norm(n) for n in prof.names()}:
            if key in keys and keys[key] != prof.name:
                raise DataFileError(f"model name {key!r} is claimed by both {keys[key]} and {prof.name}")
            keys[key] = prof.name
    return tuple(profiles)


@functools.cache
def _name_keys() -> tuple[tuple[ModelProfile, frozenset[str]], ...]:
    return tuple((p, frozenset(norm(n) for n in p.names())) for p in load_profiles())


def find(text: str) -> tuple[ModelProfile, str | None] | None:
    """(catalog profile, the quant its name selects or None) for a name / alias / slug / HF id."""
    key = norm(text)
    org_less = key.split("/", 1)[1] if "/" in key else key
    for candidate in (key, org_less):
        for prof, names in _name_keys():
            if candidate in names:
                hf_key = next(
                    (k for k, ids in prof.hf_repo_ids.items() if candidate in {norm(i) for i in ids}), None
                )
                return prof, HF_KEY_QUANT.get(hf_key or "")
    m = QUANT_SUFFIX.search(org_less)
    if m:
        base = org_less[: m.start()]
        for prof, names in _name_keys():
            if base in names or base in {n.split("/")[-1] for n in names}:
                return prof, SUFFIX_QUANT[m.group(1).lower()]
    return None


def closest_names(text: str, n: int = 5) -> list[str]:
    pool: dict[str, str] = {}
    for prof in load_profiles():
        for name in [prof.name, *prof.aliases]:
            pool[norm(name)] = name
    key = norm(text)[: max(map(len, pool), default=0) + 2]  # a very long text: its start is the name
    import difflib  # (only for a name that is not found)

    return [pool[k] for k in difflib.get_close_matches(key, list(pool), n=n, cutoff=0.4)]


def _with_quant(prof: ModelProfile, quant: str | None) -> ModelProfile:
    if quant is None or quant == prof.quant:
        return prof
    if prof.quant_formats and quant not in prof.quant_formats:
        fp8ish = {"fp8", "fp8_block"}
        match = next((q for q in prof.quant_formats if quant in fp8ish and q in fp8ish), None)
        if match is None:
            log.info("%s: quant %s is not among the known formats %s", prof.name, quant, prof.quant_formats)
            return replace(prof, quant=quant, quant_formats=(*prof.quant_formats, quant))
        quant = match
    return replace(prof, quant=quant)


def find_profile(text: str) -> ModelProfile | None:
    """Catalog lookup by name, alias, slug or HF repo id (a ``-NVFP4``-style suffix picks the quant)."""
    hit = find(text)
    return None if hit is None else _with_quant(*hit)
