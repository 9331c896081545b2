"""The Python environments of an image: ``site-packages`` / ``dist-packages`` folders and the
distributions installed there, from their ``*.dist-info`` folder names and ``RECORD`` files.

Attribution follows :class:`probe.arch.scanner.PackageResolver` (so an image scan and a scan of the
same image unpacked name the same package): the distribution whose ``RECORD`` lists the file, else
the file's top-level folder under the site folder. Paths here are image paths without the leading
``/`` (``usr/lib/python3.12/site-packages/vllm/_C.abi3.so``).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from probe.arch.dists import dist_name_version, site_versions
from probe.arch.records import Environment
from probe.arch.roots import DEVICE_FILE_RE, SITE_DIR_NAMES

RECORD_RE = re.compile(r"^(?P<site>(?:.*/)?(?:site|dist)-packages)/(?P<dist>[^/]+)\.dist-info/RECORD$")
MAX_RECORD = 64 << 20


def record_paths(record_path: str, data: bytes | bytearray) -> list[str]:
    """Image paths of the device-code files a RECORD lists (other lines are dropped)."""
    m = RECORD_RE.match(record_path)
    if not m:
        return []
    site = m.group("site")
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        rel = line.split(",", 1)[0]
        if rel and DEVICE_FILE_RE.search(rel):
            out.append(posixpath.normpath(posixpath.join(site, rel)))
    return out


def site_dir_of(path: str) -> tuple[str, str] | None:
    """(site folder, path inside it) for a path under a site-packages / dist-packages folder."""
    for marker in SITE_DIR_NAMES:
        i = ("/" + path).rfind("/" + marker + "/")
        if i >= 0:
            end = i + len(marker)
            return path[:end], path[end + 1 :]
    return None


@dataclass
class Environments:
    """Distributions per site folder, and the package and version of each device-code file."""

    #: site folder -> names of the ``*.dist-info`` folders in it
    _dists: dict[str, set[str]] = field(default_factory=dict)
    _owner: dict[str, str] = field(default_factory=dict)  # file path -> distribution
    _sites: dict[str, dict[str, str | None]] | None = None

    @property
    def sites(self) -> dict[str, dict[str, str | None]]:
        """site folder -> {distribution: version} (as :func:`probe.arch.dists.site_versions`)."""
        if self._sites is None:
            self._sites = {site: site_versions(names) for site, names in self._dists.items()}
        return self._sites

    def add_record(self, record_path: str, files: list[str]) -> None:
        m = RECORD_RE.match(record_path)
        if not m:
            return
        name, _ = dist_name_version(m.group("dist"))
        for f in files:
            self._owner.setdefault(f, name)

    def add_path(self, path: str) -> None:
        """Note the site folder holding ``path`` (a folder without any dist-info still counts), and
        the ``*.dist-info`` folder it lies in, if any."""
        found = site_dir_of(path)
        if found:
            self._sites = None
            names = self._dists.setdefault(found[0], set())
            top = found[1].split("/", 1)[0]
            if top.endswith(".dist-info") and "/" in found[1]:
                names.add(top)

    def package_of(self, path: str) -> str | None:
        found = site_dir_of(path)
        if not found:
            return None
        owner = self._owner.get(path)
        if owner:
            return owner
        top = found[1].split("/", 1)[0].split(".")[0]
        return top or None

    def version_of(self, path: str, package: str | None) -> str | None:
        """The version of ``package`` in the site folder holding ``path`` (None: not known)."""
        found = site_dir_of(path)
        return self.sites.get(found[0], {}).get(package) if found and package else None

    def records(self, prefix: str) -> list[Environment]:
        """The environments as report records, site paths as ``IMAGE!/usr/lib/…/site-packages``."""
        return [
            Environment(site=f"{prefix}/{site}", packages=dict(sorted(pk.items())))
            for site, pk in sorted(self.sites.items())
        ]
