"""What kind of input a path given to ``probe scan`` is, decided without importing the readers.

:func:`looks_like_image` is the per-input test :func:`probe.arch.scan.scan_inputs` runs on every
path it is given (a stat for a folder, a 512-byte read for a file): only when it says "image" is
:mod:`probe.arch.image` imported. Files met while walking a folder are never tested (a ``.tar``
inside site-packages is not an input).
"""

# ruff: noqa: PTH112, PTH113, PTH118
# (paths stay str: one stat / read per input)

from __future__ import annotations

import os

__all__ = ["looks_like_image"]


def looks_like_image(path: str) -> bool:
    """An OCI layout folder (``index.json`` + ``oci-layout`` or ``blobs/``), or a file that is a tar
    archive: named ``*.tar``, or starting with a ustar header whose checksum holds."""
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, "index.json")) and (
            os.path.isfile(os.path.join(path, "oci-layout")) or os.path.isdir(os.path.join(path, "blobs"))
        )
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    if path.endswith(".tar"):
        return True  # an image by name: a corrupt one gets an image error, not "not an ELF file"
    if len(head) < 512 or head[257:262] != b"ustar":
        return False
    try:
        chk = int(head[148:156].split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        return False
    return chk == sum(head[:148]) + 256 + sum(head[156:])
