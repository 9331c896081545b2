"""Content digests of the installed packages a cell runs on, for ``probe run --reuse``.

The distributions are those of the folders the interpreter the cells run in imports from (``sys.path``:
its site-packages and ``$PYTHONPATH``, :func:`import_path`), the first of a name in path order.

A distribution installed by pip (or uv, or any installer following the packaging spec) lists every file
it installed, with each file's sha256, in ``<name>-<version>.dist-info/RECORD``. The digest of a
distribution is the sha256 of that RECORD's bytes: cheap (one small file, no walk of the package) and
exact for what the installer wrote: a rebuilt wheel with any changed file has another RECORD. A
*component* (the backend catalog's ``components``: vLLM, torch, the CUDA libraries, FlashInfer, Triton, ...)
digests the sorted ``name==version:digest`` lines of every installed distribution matching its patterns;
a component with none installed is ``absent`` (installing it later changes the digest).

What a digest cannot see, and how probe answers:

* files changed after installation (a patched ``.py``, a replaced ``.so``): RECORD still lists the old
  hashes. Rebuild the image (a new install writes a new RECORD) or run without ``--reuse``;
* an editable install (``pip install -e``, ``direct_url.json`` with ``"editable": true``) or a
  distribution without RECORD (``.egg-info``, ``setup.py install``, conda / distro packages): its code is
  not listed, so the component is ``unknown`` and its cells are never reused;
* anything outside those folders: the CUDA driver (``libcuda``: the driver version is part
  of the reuse key instead), system libraries, the CUDA toolkit JIT builds use (``nvcc``), environment
  variables, and the JIT caches (a cached module built by an older FlashInfer is rebuilt by FlashInfer).

Digests are cached by (RECORD path, size, mtime) in ``record-digests-v1.json`` of probe's cache folder
(``$PROBE_CACHE_DIR``, else ``~/.cache/probe``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ABSENT = "absent"
UNKNOWN = "unknown"
CACHE_NAME = "record-digests-v1.json"


def import_path(python: str | None = None, timeout_s: float = 60.0) -> list[str]:
    """The folders ``python`` (default: this interpreter) imports from, in order (``sys.path``: its
    site-packages and ``$PYTHONPATH``, e.g. a ``pip install --target`` tree), existing folders only."""
    import subprocess
    import sys

    from probe.errors import UsageError

    if python is None:
        paths = list(sys.path)
    else:
        code = "import json, sys; print(json.dumps(sys.path))"
        try:
            out = subprocess.run(
                [python, "-c", code], capture_output=True, text=True, timeout=timeout_s, check=True
            )
            paths = json.loads(out.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
            raise UsageError(f"--python {python}: cannot ask it for its import path: {exc}") from None
    seen: set[str] = set()
    folders = []
    for p in paths:
        if p and os.path.isdir(p) and os.path.realpath(p) not in seen:  # noqa: PTH112
            seen.add(os.path.realpath(p))
            folders.append(os.path.abspath(p))  # noqa: PTH100
    return folders


def norm_name(name: str) -> str:
    """A distribution name as pip compares them: lower case, runs of ``-_.`` as ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Dist:
    """One installed distribution: its metadata folder and why its content cannot be digested, if so."""

    name: str  # normalised
    version: str
    meta: Path  # the *.dist-info / *.egg-info folder
    undigestable: str | None = None  # "editable install", "no RECORD (.egg-info)" ...

    @property
    def record(self) -> Path:
        return self.meta / "RECORD"


def _editable(meta: Path) -> bool:
    try:
        info = json.loads((meta / "direct_url.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and bool((info.get("dir_info") or {}).get("editable"))


def _dist_of(site: Path, entry: str) -> Dist | None:
    for suffix in (".dist-info", ".egg-info"):
        if entry.endswith(suffix):
            stem = entry[: -len(suffix)]
            name, _, version = stem.partition("-")
            meta = site / entry
            why = None
            if suffix == ".egg-info":
                why = "no RECORD (an .egg-info install)"
            elif _editable(meta):
                why = "an editable install (its source files are not listed)"
            elif not (meta / "RECORD").is_file():
                why = "no RECORD in its .dist-info"
            return Dist(norm_name(name), version.split("-")[0] or "?", meta, why)
    return None


def installed(site_dirs: Iterable[str | Path]) -> dict[str, Dist]:
    """Distributions of the site-packages folders, the first one of each name in path order (the one
    Python imports)."""
    out: dict[str, Dist] = {}
    for site in site_dirs:
        folder = Path(site)
        try:
            entries = sorted(os.listdir(folder))  # noqa: PTH208 (names only; thousands of entries)
        except OSError:
            continue
        for entry in entries:
            dist = _dist_of(folder, entry)
            if dist is not None:
                out.setdefault(dist.name, dist)
    return out


class DigestCache:
    """sha256 of RECORD files, keyed by (path, size, mtime_ns); read once, written back when it grew."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.hits = self.misses = 0
        self._data: dict[str, list[object]] = {}
        if path is not None:
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(data, dict):
                    self._data = data
        self._dirty = False

    def digest(self, record: Path) -> str | None:
        try:
            st = record.stat()
        except OSError:
            return None
        key = str(record)
        hit = self._data.get(key)
        if isinstance(hit, list) and len(hit) == 3 and hit[:2] == [st.st_size, st.st_mtime_ns]:
            self.hits += 1
            return str(hit[2])
        try:
            digest = hashlib.sha256(record.read_bytes()).hexdigest()
        except OSError:
            return None
        self.misses += 1
        self._data[key] = [st.st_size, st.st_mtime_ns, digest]
        self._dirty = True
        return digest

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".digests-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._data, f, separators=(",", ":"))
            Path(tmp).replace(self.path)
            self._dirty = False


def default_cache() -> DigestCache:
    from probe.cachedir import cache_dir

    return DigestCache(cache_dir() / CACHE_NAME)


def component_digests(
    dists: Mapping[str, Dist], components: Mapping[str, tuple[str, ...]], cache: DigestCache
) -> dict[str, str]:
    """component -> ``absent``, ``unknown: <why>``, or the first 16 hex digits of its digest."""
    out: dict[str, str] = {}
    for comp, patterns in components.items():
        members = [d for name, d in dists.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns)]
        if not members:
            out[comp] = ABSENT
            continue
        lines = []
        why = None
        for d in sorted(members, key=lambda d: d.name):
            digest = None if d.undigestable else cache.digest(d.record)
            if digest is None:
                why = f"{UNKNOWN}: {d.name} {d.version} is {d.undigestable or 'unreadable (RECORD)'}"
                break
            lines.append(f"{d.name}=={d.version}:{digest}\n")
        out[comp] = why or hashlib.sha256("".join(lines).encode()).hexdigest()[:16]
    return out


def torch_cuda(site_dirs: Iterable[str | Path]) -> str | None:
    """The CUDA version the installed torch was built for (``torch/version.py``, read as text)."""
    for site in site_dirs:
        try:
            text = (Path(site) / "torch" / "version.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        return m.group(1) if m else None
    return None
