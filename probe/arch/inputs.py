"""What kind of input a path given to ``probe scan`` is, decided without importing the readers.

:func:`looks_like_image` is the per-input test :func:`probe.arch.scanner.scan_inputs` runs on every
path it is given (a stat for a folder, a 512-byte read for a file): only when it says "image" is
:mod:`probe.arch.image` imported. Files met while walking a folder are never tested (a ``.tar``
inside site-packages is not an input).
"""

# ruff: noqa: PTH112, PTH113, PTH118
# (paths stay str: one stat / read per input)

from __future__ import annotations

import errno
import os

from probe.userfile import describe_mode

__all__ = ["NotRegularFile", "looks_like_image", "open_regular"]


class NotRegularFile(OSError):
    """A path that is not a regular file (FIFO, socket, device, folder): never read."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(errno.EISDIR if what == "a folder" else errno.EINVAL, f"{what}, not a regular file")
        self.filename = path
        self.what = what


def open_regular(path: str) -> int:
    """A read-only descriptor of ``path`` when it is a regular file; :class:`NotRegularFile` else.

    The open itself never blocks (``O_NONBLOCK``: opening a FIFO without a writer would wait
    forever) and the type is checked on the descriptor (no race with a rename); nothing is read
    from a special file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        what = describe_mode(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)
        raise
    if what is not None:
        os.close(fd)
        raise NotRegularFile(path, what)
    return fd


def looks_like_image(path: str) -> bool:
    """An OCI layout folder (``index.json`` + ``oci-layout`` or ``blobs/``), or a file that is a tar
    archive: named ``*.tar``, or starting with a ustar header whose checksum holds."""
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, "index.json")) and (
            os.path.isfile(os.path.join(path, "oci-layout")) or os.path.isdir(os.path.join(path, "blobs"))
        )
    try:
        fd = open_regular(path)  # a FIFO / device is never an image (and never read)
    except OSError:
        return False
    try:
        head = os.pread(fd, 512, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    if path.endswith(".tar"):
        return True  # an image by name: a corrupt one gets an image error, not "not an ELF file"
    if len(head) < 512 or head[257:262] != b"ustar":
        return False
    try:
        chk = int(head[148:156].split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        return False
    return chk == sum(head[:148]) + 256 + sum(head[156:])
