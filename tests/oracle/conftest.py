"""The fake vLLM trees the oracle tests run against, assembled per version at test time.

``fake_vllm/base/`` holds the files every fake release shares; ``fake_vllm/vNNN/`` holds only the
files in which release NNN differs (the version string, changed signatures). A tree is the base
copied first and the overlay copied over it. ``fake_vllm/v020/`` is a whole tree on its own: a
vLLM without any of the APIs (only its version), so it is used as is.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

FAKE = Path(__file__).parent / "fake_vllm"
BASE = FAKE / "base"
OVERLAID = ("v026", "v033")  # the versions assembled from base + overlay
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def assemble(version: str, dest: Path) -> Path:
    """Copy the base tree, then ``fake_vllm/<version>`` over it, into ``dest``; returns ``dest``."""
    if version not in OVERLAID:
        raise ValueError(f"{version!r} is not an overlay of fake_vllm/base (have {OVERLAID})")
    shutil.copytree(BASE, dest, ignore=_IGNORE)
    shutil.copytree(FAKE / version, dest, ignore=_IGNORE, dirs_exist_ok=True)
    return dest


@pytest.fixture(scope="session")
def fake_vllm_tree(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``fake_vllm_tree("v026")`` -> a directory to put on the child's PYTHONPATH (built once per version)."""
    built: dict[str, Path] = {}

    def tree(version: str) -> Path:
        if version not in built:
            built[version] = assemble(version, tmp_path_factory.mktemp(f"fake_vllm_{version}") / "site")
        return built[version]

    return tree
