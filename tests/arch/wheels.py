"""Real wheels from PyPI for the backend-view tests and benchmarks, cached under ~/.cache/probe-tests."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

CACHE = Path(os.environ.get("PROBE_TESTS_CACHE", Path.home() / ".cache" / "probe-tests"))
WHEELS = CACHE / "wheels"
UNPACKED = CACHE / "unpacked"

# name -> (requirement, pip download options, file-name prefix)
KNOWN: dict[str, tuple[str, list[str], str]] = {
    "bitsandbytes": (
        "bitsandbytes==0.50.2",
        ["--platform", "manylinux_2_24_x86_64", "--python-version", "3.11"],
        "bitsandbytes-0.50.2-",
    ),
    "vllm": (
        "vllm==0.33.0",
        ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11"],
        "vllm-0.33.0-",
    ),
    "flashinfer-python": ("flashinfer-python==0.7.2.post1", [], "flashinfer_python-0.7.2.post1-"),
    "flashinfer-cubin": ("flashinfer-cubin==0.6.13", [], "flashinfer_cubin-0.6.13-"),
    "torch": (
        "torch==2.14.1",
        ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11"],
        "torch-2.14.1-",
    ),
}


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One test process at a time fills ``folder`` (pytest-xdist workers share the cache)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def wheel(name: str) -> Path:
    """The cached wheel, downloaded with pip on first use (raises RuntimeError when pip fails)."""
    with _locked(WHEELS):
        return _wheel(name)


def _wheel(name: str) -> Path:
    req, opts, prefix = KNOWN[name]
    found = sorted(WHEELS.glob(f"{prefix}*.whl"))
    if found:
        return found[0]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(WHEELS),
        *opts,
        req,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = sorted(WHEELS.glob(f"{prefix}*.whl"))
    if out.returncode != 0 or not found:
        raise RuntimeError(f"pip download {req} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return found[0]


def unpacked(whl: Path, members: str | None = None) -> Path:
    """The wheel unpacked once under ~/.cache/probe-tests/unpacked/<wheel stem>/ (only members
    ending in ``members`` when given, e.g. '.so')."""
    with _locked(UNPACKED):
        return _unpacked(whl, members)


def _unpacked(whl: Path, members: str | None) -> Path:
    dest = UNPACKED / whl.stem
    marker = dest / f".complete{members or ''}"
    if marker.exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            if info.is_dir() or (members and not info.filename.endswith(members)):
                continue
            zf.extract(info, dest)
    marker.write_text("ok")
    return dest


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
