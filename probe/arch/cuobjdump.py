"""``--verify-with-cuobjdump``: list the same files with NVIDIA's cuobjdump and compare.

cuobjdump is looked up on ``PATH``, in ``$CUDA_HOME/bin`` (and ``$CUDA_PATH``), in
``/usr/local/cuda/bin`` and in ``site-packages/nvidia/cu13/bin`` (the ``nvidia-cuda-cuobjdump``
wheel). Listings compared per file (docs/fatbin.md §8):

- ``--list-elf``: one line per cubin, named from the *ELF* (so ``sm_100f`` prints as ``sm_100``;
  ``a`` is kept) — compared as a multiset with probe's SASS entries, ``f`` dropped;
- ``--list-ptx``: one line per PTX entry, labelled ``sm_`` but keeping ``a``/``f`` — compared as
  a multiset with probe's PTX entries (``compute_`` renamed ``sm_``).

cuobjdump lists ``.nv_fatbin`` only, or ``__nv_relfatbin`` when a file has no ``.nv_fatbin``.
Wheel members (``x.whl!member``) are copied, one at a time, to a temporary file for cuobjdump
(which needs a file on disk); bare ``.ptx`` files are skipped (cuobjdump does not read them).
"""

# ruff: noqa: PTH119
# (paths stay str on the scan's hot path: os.path is several times cheaper than pathlib)

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from probe.arch.records import FileRecord, VerifyReport

log = logging.getLogger(__name__)

_ELF_LINE = re.compile(r"^ELF file\s+\d+:\s+.*\.(sm_\d+[af]?)\.cubin\s*$")
_PTX_LINE = re.compile(r"^PTX file\s+\d+:\s+.*\.(sm_\d+[af]?)\.ptx\s*$")
NO_CODE = "does not contain device code"
NO_PTX = "No PTX file found"


def find_cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / "cuobjdump")
    candidates.append(Path("/usr/local/cuda/bin/cuobjdump"))
    for key in ("purelib", "platlib"):
        sp = sysconfig.get_paths().get(key)
        if sp:
            candidates += [
                Path(sp) / "nvidia" / sub / "bin" / "cuobjdump" for sub in ("cu13", "cu12", "cuda_cuobjdump")
            ]
    try:
        import site

        for sp in [*site.getsitepackages(), site.getusersitepackages()]:
            candidates += [Path(sp) / "nvidia" / sub / "bin" / "cuobjdump" for sub in ("cu13", "cu12")]
    except AttributeError:
        pass
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def run_listing(tool: str, path: str, what: str, timeout: float = 600.0) -> list[str]:
    """Labels listed by ``cuobjdump --list-elf`` (``what='elf'``) or ``--list-ptx``; [] when the
    file has no such code. Raises RuntimeError when cuobjdump fails otherwise."""
    flag = "--list-elf" if what == "elf" else "--list-ptx"
    try:
        out = subprocess.run(
            [tool, flag, path], capture_output=True, text=True, timeout=timeout, check=False, errors="replace"
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"cuobjdump {flag} timed out after {timeout:.0f} s") from None
    except OSError as exc:
        raise RuntimeError(f"cannot run cuobjdump: {exc}") from None
    text = out.stdout + out.stderr
    rx = _ELF_LINE if what == "elf" else _PTX_LINE
    labels = [m.group(1) for line in out.stdout.splitlines() if (m := rx.match(line.strip()))]
    if out.returncode != 0 and not labels and NO_CODE not in text and NO_PTX not in text:
        raise RuntimeError(f"cuobjdump {flag} exited {out.returncode}: {text.strip()[:300]}")
    return labels


def expected_listing(rec: FileRecord) -> tuple[list[str], list[str]]:
    """What cuobjdump should print for a record: (ELF labels, PTX labels)."""
    has_exec = any(e.section in (".nv_fatbin", "fatbin", "cubin") for e in rec.entries)
    sections = (".nv_fatbin", "fatbin", "cubin") if has_exec else ("__nv_relfatbin",)
    elf_labels, ptx_labels = [], []
    for e in rec.entries:
        if e.section not in sections or not e.arch:
            continue
        if e.kind == "sass":
            # cuobjdump names cubins from the ELF: no "f"; bare cubins keep whatever the ELF says
            elf_labels.append(f"sm_{e.sm}" + ("a" if e.suffix == "a" else ""))
        elif e.kind == "ptx":
            ptx_labels.append(f"sm_{e.sm}{e.suffix}")
    return elf_labels, ptx_labels


@contextlib.contextmanager
def _on_disk(path: str) -> Iterator[str]:
    """The path itself, or a temporary copy of a wheel member ``/x.whl!member``."""
    if "!" not in path:
        yield path
        return
    whl, member = path.split("!", 1)
    try:
        with (
            zipfile.ZipFile(whl) as zf,
            zf.open(member) as src,
            tempfile.NamedTemporaryFile(prefix="probe-verify-", suffix="-" + os.path.basename(member)) as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            yield dst.name
    except (OSError, zipfile.BadZipFile, KeyError) as exc:
        raise RuntimeError(f"cannot extract {member} from {whl}: {exc}") from None


def compare(rec: FileRecord, tool: str, timeout: float = 600.0) -> list[dict[str, object]]:
    """Disagreements between probe's record and cuobjdump's listings (empty: they agree)."""
    want_elf, want_ptx = expected_listing(rec)
    out: list[dict[str, object]] = []
    with _on_disk(rec.path) as on_disk:  # a wheel member is extracted once for both listings
        listings = [
            (what, want, run_listing(tool, on_disk, what, timeout))
            for what, want in (("elf", want_elf), ("ptx", want_ptx))
        ]
    for what, want, got in listings:
        a, b = Counter(want), Counter(got)
        if a != b:
            out.append(
                {
                    "path": rec.path,
                    "what": f"--list-{what}",
                    "probe": sorted((a - b).elements()),
                    "cuobjdump": sorted((b - a).elements()),
                }
            )
    return out


def verify_files(
    files: Sequence[FileRecord], tool: str | None = None, timeout: float = 600.0
) -> VerifyReport:
    tool = tool or find_cuobjdump()
    rep = VerifyReport(cuobjdump=tool)
    if tool is None:
        return rep
    for rec in files:
        if rec.error or not rec.entries or rec.kind == "ptx":
            continue
        rep.files_checked += 1
        try:
            diffs = compare(rec, tool, timeout)
        except RuntimeError as exc:
            rep.errors.append({"path": rec.path, "error": str(exc)})
            continue
        if diffs:
            rep.disagreements.extend(diffs)
        else:
            rep.files_agree += 1
    return rep
