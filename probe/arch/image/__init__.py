"""``probe scan IMAGE.tar`` / ``probe scan OCI-LAYOUT-DIR``: the device code of a built container
image, read from its layers without running or unpacking it.

Library API::

    from probe.arch.image import is_image, scan_image
    res = scan_image("image.tar", platform="linux/arm64", kernels=False)
    res.files         # list[FileRecord]: /abs/image.tar!/usr/lib/python3.12/site-packages/vllm/_C.abi3.so
    res.environments  # [Environment(site="/abs/image.tar!/usr/lib/python3.12/site-packages",
                      #              packages={"vllm": "0.33.0"})]

Modules: :mod:`~probe.arch.image.layout` (docker-save / OCI index, ``--platform``),
:mod:`~probe.arch.image.layers` (one streaming pass per layer: gzip / zstd / plain tar),
:mod:`~probe.arch.image.reader` (whiteouts, visibility, links, per-member description),
:mod:`~probe.arch.image.envs` (site-packages and ``*.dist-info`` attribution),
:mod:`~probe.arch.image.cache` (results per layer digest).
A bad image gives a record with an ``error`` (exit 5), never an exception; an ambiguous choice of
image / platform raises :class:`~probe.errors.UsageError`.
"""

# ruff: noqa: PTH100
# (image paths stay str: records name them as text)

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from probe.arch.inputs import looks_like_image

if TYPE_CHECKING:
    from probe.arch.records import Environment, FileRecord

__all__ = ["ImageScan", "is_image", "scan_image"]


@dataclass
class ImageScan:
    path: str
    files: list[FileRecord]
    environments: list[Environment] = field(default_factory=list)
    platform: str | None = None
    layers: int = 0


def is_image(path: str) -> bool:
    """An OCI layout folder, or a file that is a tar archive (a ``docker save`` / OCI tarball);
    see :func:`probe.arch.inputs.looks_like_image`."""
    return looks_like_image(path)


def scan_image(
    path: str, *, kernels: bool = False, platform: str | None = None, use_cache: bool = True
) -> ImageScan:
    """One record per visible device-code file of the image (see :mod:`probe.arch.image.reader`)."""
    from probe.arch.image.cache import LayerCache
    from probe.arch.image.layout import ImageError, open_image
    from probe.arch.image.reader import layer_indexes
    from probe.arch.image.tree import final_records
    from probe.arch.records import FileRecord

    prefix = os.path.abspath(path)
    try:
        img = open_image(prefix, platform)
    except ImageError as exc:
        return ImageScan(prefix, [FileRecord(path=prefix, error=str(exc))])
    except OSError as exc:
        return ImageScan(
            prefix, [FileRecord(path=prefix, error=f"cannot read the image: {exc.strerror or exc}")]
        )
    cache = LayerCache() if use_cache else None
    try:
        indexes, upper = layer_indexes(img.layers, kernels=kernels, cache=cache)
    finally:
        if cache is not None:
            cache.close()
    files, envs = final_records(indexes, upper, prefix, img.layers)
    return ImageScan(prefix, files, envs.records(prefix + "!"), img.platform, len(img.layers))
