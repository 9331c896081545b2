"""Versions of the distributions installed in a ``site-packages`` / ``dist-packages`` folder, from
their ``*.dist-info`` folder names (``vllm-0.33.0.dist-info``), and of a wheel from its file name.

Shared by the scan of a folder (:class:`SiteVersions`, one ``listdir`` per site folder) and of an
image (:mod:`probe.arch.image.envs`, from the member names), so both give a file the same
``package_version``: the version of the distribution named like the file's ``package`` in the
site folder holding the file; None when no such ``*.dist-info`` folder is there. Names are
normalised as :class:`probe.arch.roots.PackageResolver` does (``_`` -> ``-``, lower case); when
one folder holds two ``*.dist-info`` of one name (a broken environment), the last by name wins.
"""

# ruff: noqa: PTH119, PTH208
# (paths stay str: they are joined once per site folder)

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from probe.arch.roots import SITE_DIR_NAMES

__all__ = ["SiteVersions", "dist_name_version", "site_versions", "wheel_version"]

_WHEEL_NAME = re.compile(r"^[^-]+-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def dist_name_version(dist_info: str) -> tuple[str, str | None]:
    """``vllm-0.33.0`` (a ``*.dist-info`` folder name without the suffix) -> (``vllm``, ``0.33.0``)."""
    name, _, version = dist_info.partition("-")
    return name.replace("_", "-").lower(), version.split("-")[0] or None


def site_versions(dist_info_names: Iterable[str]) -> dict[str, str | None]:
    """{distribution: version} of the ``*.dist-info`` folder names of one site folder."""
    out: dict[str, str | None] = {}
    for n in sorted(dist_info_names):
        if n.endswith(".dist-info"):
            name, version = dist_name_version(n[: -len(".dist-info")])
            out[name] = version
    return out


def wheel_version(path: str) -> str | None:
    """``vllm-0.33.0-cp38-abi3-manylinux_2_31_x86_64.whl`` -> ``0.33.0`` (None: not a wheel name)."""
    m = _WHEEL_NAME.match(os.path.basename(path))
    return m.group("version") if m else None


class SiteVersions:
    """``package_version`` of files on disk: one ``listdir`` per site folder, remembered."""

    def __init__(self) -> None:
        self._sites: dict[str, dict[str, str | None]] = {}

    def _versions(self, site_dir: str) -> dict[str, str | None]:
        got = self._sites.get(site_dir)
        if got is None:
            try:
                names = os.listdir(site_dir)
            except OSError:
                names = []
            got = self._sites[site_dir] = site_versions(names)
        return got

    def version_of(self, path: str, package: str | None) -> str | None:
        """The version of ``package`` in the site folder holding ``path`` (None: not known)."""
        if not package:
            return None
        for marker in SITE_DIR_NAMES:
            i = path.rfind(os.sep + marker + os.sep)
            if i >= 0:
                return self._versions(path[: i + len(marker) + 1]).get(package)
        return None
