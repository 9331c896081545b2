"""probe's cache folder: ``$PROBE_CACHE_DIR``, else ``$XDG_CACHE_HOME/probe``, else ``~/.cache/probe``,
the user's alone. Whoever can write it decides what a cached answer says, so a folder another user owns
or that group / others may write is refused with the reason (a warning; the caller goes on uncached).
Standard library only: the fast verbs import it."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

__all__ = ["cache_dir", "secure_cache_dir"]

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    if os.environ.get("PROBE_CACHE_DIR"):
        return Path(os.environ["PROBE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "probe"


def secure_cache_dir(warn: bool = True) -> Path | None:
    """The cache folder, created user-only (0700) when missing; None (with a warning saying why, a
    debug line with ``warn=False``) when it cannot be made or is not the user's alone: owned by
    another user, or writable by group or others."""
    level = logging.WARNING if warn else logging.DEBUG
    try:
        path = cache_dir()
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except (OSError, RuntimeError) as exc:  # RuntimeError: no home folder to be found
        log.log(level, "cache folder disabled: %s", exc)
        return None
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = "not a folder"
    elif hasattr(os, "getuid") and st.st_uid != os.getuid():
        problem = f"owned by uid {st.st_uid}, not by this user"
    elif st.st_mode & 0o022:
        problem = f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o}; chmod 700 it)"
    if problem:
        log.log(level, "cache %s refused: %s; going on without it", path, problem)
        return None
    return path
