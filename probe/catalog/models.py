"""The model catalog (``probe/data/models/*.json``) and how a user's model text resolves to a profile.

``resolve_model(text)`` accepts a profile name / alias / Hugging Face id (``122b``,
``Qwen3.5-122B-A10B``, ``nvidia/Qwen3.5-122B-A10B-NVFP4``), a path to a ``config.json`` or a model
folder, or a Hugging Face id present in the local HF cache; a ``-NVFP4`` / ``-FP8`` suffix selects
that quant format. The profile type is :mod:`probe.catalog.profile`, the quant list
:mod:`probe.catalog.quants`, config.json parsing :mod:`probe.catalog.from_config`. (The engine
probe's synthetic config.json dicts: ``probe.probes.hf_config``.)
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import replace
from pathlib import Path

from probe.catalog import datafiles
from probe.catalog.names import HF_KEY_QUANT, QUANT_SUFFIX, SUFFIX_QUANT, norm
from probe.catalog.profile import ModelProfile, profile_from_dict

# the names other packages import from here (one definition each, in the modules named above)
from probe.catalog.quants import QUANTS as QUANTS
from probe.catalog.quants import VLLM_QUANT_METHOD as VLLM_QUANT_METHOD
from probe.catalog.quants import quantization_config as quantization_config
from probe.errors import DataFileError, UsageError

log = logging.getLogger(__name__)

__all__ = ["QUANTS", "VLLM_QUANT_METHOD", "ModelProfile", "find", "find_profile", "load_profiles",
           "quantization_config", "resolve_model"]  # fmt: skip


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


def hf_cache_dirs() -> list[Path]:
    """Hub cache folders, in the order huggingface_hub uses them."""
    dirs: list[Path] = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        dirs.append(Path(os.environ["HUGGINGFACE_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


MAX_PATH_CHARS = 4096  # PATH_MAX on Linux: longer text is no file name (and makes the OS raise)


def as_model_path(text: str) -> Path | None:
    """``text`` as an existing config.json / model folder, or None (never raises for odd text)."""
    if not text or len(text) > MAX_PATH_CHARS or "\x00" in text:
        return None
    try:
        path = Path(text).expanduser()
        return path if path.is_dir() or path.is_file() else None
    except (OSError, ValueError, RuntimeError):  # a name too long, a bad ~user
        return None


def find_in_hf_cache(repo_id: str) -> Path | None:
    """The newest snapshot's config.json of ``org/name`` in the local HF cache (no network)."""
    if repo_id.count("/") != 1 or len(repo_id) > 255:
        return None
    try:
        return _cached_config(repo_id)
    except OSError:
        return None


def _cached_config(repo_id: str) -> Path | None:
    folder = "models--" + repo_id.replace("/", "--")
    for cache in hf_cache_dirs():
        base = cache / folder
        if not base.is_dir():
            continue
        ref = base / "refs" / "main"
        if ref.is_file():
            cfg = base / "snapshots" / ref.read_text().strip() / "config.json"
            if cfg.is_file():
                return cfg
        configs = sorted(
            (base / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        if configs:
            return configs[0]
    return None


def resolve_model(text: str) -> ModelProfile:
    """Profile for a name / alias / HF id, a config.json or model folder, or a cached HF id."""
    from probe.catalog.from_config import profile_from_path  # paths only: keeps recommend's start lean

    if not text or not text.strip():
        raise UsageError("empty model name")
    prof = find_profile(text)
    if prof is not None:
        return prof
    path = as_model_path(text)
    if path is not None:
        return profile_from_path(path)
    cached = find_in_hf_cache(text.strip())
    if cached is not None:
        return profile_from_path(cached.parent, name=text.strip())
    close = closest_names(text)
    hint = f"did you mean: {', '.join(close)}?" if close else "run `probe models` for the list"
    shown = text if len(text) <= 120 else f"{text[:60]}…({len(text)} characters)"
    raise UsageError(
        f"unknown model {shown!r} (not a profile, a config.json path, or a model in the local "
        f"Hugging Face cache)",
        hint=hint + " — or pass a path to a config.json / model folder",
    )
