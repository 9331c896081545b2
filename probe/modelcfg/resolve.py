"""How a user's model text resolves to a profile: a catalog profile, or a config.json read as vLLM reads it.

``resolve_model(text)`` accepts a profile name / alias / Hugging Face id (the catalog,
:func:`probe.catalog.models.find_profile`), a path to a ``config.json`` or a model folder, or a Hugging Face
id present in the local HF cache (no network); a ``-NVFP4`` / ``-FP8`` suffix selects that quant format.
"""

from __future__ import annotations

import os
from pathlib import Path

from probe.catalog.models import closest_names, find_profile
from probe.catalog.profile import ModelProfile
from probe.errors import UsageError
from probe.modelcfg.config_reader import profile_from_path


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
