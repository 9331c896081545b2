"""Where device code lies: site-packages of an interpreter, JIT / kernel caches, and which
distribution a file under a site-packages folder belongs to (the walk itself:
:mod:`probe.arch.walk`).
"""

# ruff: noqa: PTH100, PTH112, PTH118, PTH208
# (paths stay str on the scan's hot path: os.path is several times cheaper than pathlib)

from __future__ import annotations

import json
import logging
import os
import re
import site
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from probe.errors import UsageError

log = logging.getLogger(__name__)

#: names of files that may hold device code when met while walking a folder
DEVICE_FILE_RE = re.compile(r"(\.so(\.\d+)*|\.cubin|\.fatbin|\.ptx|\.whl)$")
SITE_DIR_NAMES = ("site-packages", "dist-packages")


def _python_site_dirs_code() -> str:
    return (
        "import json,site,sysconfig\n"
        "p=[sysconfig.get_paths().get(k) for k in ('purelib','platlib')]\n"
        "try: p+=site.getsitepackages()\nexcept Exception: pass\n"
        "try: p.append(site.getusersitepackages())\nexcept Exception: pass\n"
        "print(json.dumps([x for x in p if x]))"
    )


def default_roots(python: str | None = None, *, timeout: float = 60.0) -> list[str]:
    """Site-packages folders of the running interpreter, or of ``python`` (asked in a subprocess)."""
    if python is None:
        dirs: list[str] = [sysconfig.get_paths().get(k) or "" for k in ("purelib", "platlib")]
        try:
            dirs += site.getsitepackages()
        except AttributeError:  # old virtualenv's site module
            pass
        try:
            dirs.append(site.getusersitepackages())
        except AttributeError:
            pass
    else:
        import subprocess

        try:
            out = subprocess.run(
                [python, "-c", _python_site_dirs_code()],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError:
            raise UsageError(f"--python {python}: no such interpreter") from None
        except PermissionError:
            raise UsageError(f"--python {python}: not executable") from None
        except subprocess.TimeoutExpired:
            raise UsageError(f"--python {python}: did not answer within {timeout:.0f} s") from None
        except OSError as exc:
            raise UsageError(f"--python {python}: cannot run it: {exc}") from None
        if out.returncode != 0:
            raise UsageError(
                f"--python {python}: exited with {out.returncode}: "
                f"{out.stderr.strip().splitlines()[-1:] or ''}"
            )
        try:
            dirs = [str(d) for d in json.loads(out.stdout.strip().splitlines()[-1])]
        except (ValueError, IndexError):
            raise UsageError(f"--python {python}: unexpected answer {out.stdout[:200]!r}") from None
    seen: set[str] = set()
    roots: list[str] = []
    for d in dirs:
        if not d or not os.path.isdir(d):
            continue
        real = os.path.realpath(d)
        if real in seen:
            continue
        seen.add(real)
        roots.append(os.path.abspath(d))
    return roots


def cache_roots(site_dirs: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Known JIT / kernel caches that exist here: ``(folder, label)``.

    FlashInfer JIT cache (``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer``, default
    ``~/.cache/flashinfer``) and ``$FLASHINFER_CUBIN_DIR``; the flashinfer-cubin and
    flashinfer-jit-cache package trees of ``site_dirs``; the torch extension cache
    (``$TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``); the Triton cache
    (``$TRITON_CACHE_DIR``, default ``~/.triton/cache``).
    """
    home = Path.home()
    env = os.environ
    out: list[tuple[str, str]] = []
    fi_base = env.get("FLASHINFER_WORKSPACE_BASE")
    out.append(
        (
            str(Path(fi_base) / ".cache" / "flashinfer") if fi_base else str(home / ".cache" / "flashinfer"),
            "flashinfer-jit-cache-dir",
        )
    )
    if env.get("FLASHINFER_CUBIN_DIR"):
        out.append((env["FLASHINFER_CUBIN_DIR"], "flashinfer-cubin-dir"))
    for sd in site_dirs:
        out.append((os.path.join(sd, "flashinfer_cubin", "cubins"), "flashinfer-cubin"))
        out.append((os.path.join(sd, "flashinfer_jit_cache", "jit_cache"), "flashinfer-jit-cache"))
    out.append(
        (env.get("TORCH_EXTENSIONS_DIR") or str(home / ".cache" / "torch_extensions"), "torch-extensions")
    )
    out.append((env.get("TRITON_CACHE_DIR") or str(home / ".triton" / "cache"), "triton-cache"))
    seen: set[str] = set()
    found = []
    for d, label in out:
        if os.path.isdir(d) and os.path.realpath(d) not in seen:
            seen.add(os.path.realpath(d))
            found.append((os.path.abspath(d), label))
    return found


class PackageResolver:
    """Distribution name of a file under a site-packages folder, from the ``*.dist-info/RECORD``
    files (read once per folder, device-code paths only), else its top-level folder name."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, str]] = {}

    def _index(self, site_dir: str) -> dict[str, str]:
        idx = self._records.get(site_dir)
        if idx is not None:
            return idx
        idx = {}
        try:
            names = os.listdir(site_dir)
        except OSError:
            names = []
        for n in names:
            if not n.endswith(".dist-info"):
                continue
            dist = n[: -len(".dist-info")].split("-")[0].replace("_", "-").lower()
            try:
                with open(os.path.join(site_dir, n, "RECORD"), encoding="utf-8", errors="replace") as f:
                    for line in f:
                        rel = line.split(",", 1)[0]
                        if DEVICE_FILE_RE.search(rel):
                            idx.setdefault(os.path.normpath(rel), dist)
            except OSError:
                continue
        self._records[site_dir] = idx
        return idx

    def package_of(self, path: str) -> str | None:
        for marker in SITE_DIR_NAMES:
            i = path.rfind(os.sep + marker + os.sep)
            if i >= 0:
                site_dir = path[: i + len(marker) + 1]
                rel = path[i + len(marker) + 2 :]
                top = rel.split(os.sep, 1)[0].split(".")[0]
                return self._index(site_dir).get(os.path.normpath(rel)) or top or None
        return None
