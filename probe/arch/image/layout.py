"""Find the layers of a container image: a ``docker save`` tarball or an OCI image layout.

Accepted inputs (nothing is unpacked; a tarball is read in place, its members located by offset):

- ``docker save`` legacy: ``manifest.json`` (``[{"Config", "RepoTags", "Layers": ["<id>/layer.tar"]}]``),
  duplicate layers as tar symlinks;
- OCI: ``index.json`` + ``blobs/<alg>/<hex>`` (+ ``oci-layout``), as a tarball (``docker save`` of
  Docker ≥ 25, ``skopeo copy … oci-archive:``) or a folder (``skopeo copy … oci:DIR``,
  ``buildah push … oci:DIR``); nested indexes (manifest lists) are followed, attestation manifests
  (``unknown/unknown``) ignored, manifests whose blobs were not saved skipped.

When several images / platforms remain, ``platform`` (``linux/arm64``, ``linux/arm/v7``) picks one;
without it the choice is a :class:`~probe.errors.UsageError` that lists them.
Anything malformed raises :class:`ImageError` (the scan turns it into a record with an error).
"""

# ruff: noqa: PTH100, PTH112, PTH113, PTH118, PTH120, PTH202
# (paths stay str: the blob paths are joined and opened once each)

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from probe.arch.image.layers import Blob, safe_name
from probe.errors import UsageError

MAX_JSON = 16 << 20
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
MAX_NESTING = 8


class ImageError(ValueError):
    """The input is not a readable image (not a tar, no manifest, missing blob, bad JSON)."""


@dataclass
class Image:
    path: str  # absolute path of the tarball / folder
    layers: list[Blob]  # bottom layer first
    platform: str | None = None  # "linux/amd64" when known
    name: str | None = None  # a tag / reference name when the image carries one
    notes: list[str] = field(default_factory=list)


class _Source:
    """Named files of the image: members of a tarball, or files under a folder."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.is_dir = os.path.isdir(path)
        self._members: dict[str, Any] = {}  # name -> tarfile.TarInfo
        if not self.is_dir:
            self._index_tar()

    def _index_tar(self) -> None:
        import tarfile  # only when a tarball is read (scan startup stays light)

        size = os.path.getsize(self.path)
        try:
            with tarfile.open(self.path, "r:") as tf:
                for ti in tf:
                    name = safe_name(ti.name)
                    if name is not None:
                        self._members[name] = ti
        except tarfile.ReadError as exc:
            raise ImageError(f"not an image tarball: {exc}") from None
        except (EOFError, OSError, ValueError) as exc:
            raise ImageError(f"cannot read the image tarball: {exc}") from None
        for ti in self._members.values():
            if ti.isfile() and ti.offset_data + ti.size > size:
                raise ImageError(f"image tarball truncated: {ti.name} extends past its end")

    def _resolve(self, name: str) -> Any:
        ti = self._members.get(name)
        for _ in range(MAX_NESTING):  # docker save links duplicate layers to one copy
            if ti is None or not (ti.issym() or ti.islnk()):
                return ti
            target = ti.linkname if ti.islnk() else os.path.join(os.path.dirname(name), ti.linkname)
            name = safe_name(target) or ""
            ti = self._members.get(name)
        raise ImageError(f"link loop at {name} in the image tarball")

    def exists(self, name: str) -> bool:
        if self.is_dir:
            return os.path.isfile(os.path.join(self.path, name))
        ti = self._resolve(name)
        return ti is not None and ti.isfile()

    def blob(self, name: str, digest: str) -> Blob:
        if self.is_dir:
            p = os.path.join(self.path, name)
            try:
                return Blob(p, 0, os.path.getsize(p), digest)
            except OSError:
                raise ImageError(f"blob {name} missing from the layout") from None
        ti = self._resolve(name)
        if ti is None or not ti.isfile():
            raise ImageError(f"{name} missing from the image tarball")
        return Blob(self.path, ti.offset_data, ti.size, digest)

    def json(self, name: str) -> Any:
        b = self.blob(name, "")
        if b.size > MAX_JSON:
            raise ImageError(f"{name}: {b.size} bytes, too large for image metadata")
        with open(b.path, "rb") as f:
            f.seek(b.offset)
            raw = f.read(b.size)
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ImageError(f"{name} is not valid JSON: {exc}") from None


def _blob_name(digest: object) -> str:
    if not isinstance(digest, str) or ":" not in digest:
        raise ImageError(f"bad digest {digest!r}")
    alg, _, hexd = digest.partition(":")
    if not alg.isalnum() or not hexd.isalnum():
        raise ImageError(f"bad digest {digest!r}")
    return f"blobs/{alg}/{hexd}"


def _platform_str(p: Any) -> str | None:
    if not isinstance(p, dict) or not p.get("os"):
        return None
    s = f"{p.get('os')}/{p.get('architecture')}"
    return s + (f"/{p['variant']}" if p.get("variant") else "")


def _platform_matches(have: str | None, want: str) -> bool:
    if have is None:
        return False
    h, w = have.split("/"), want.split("/")
    if len(w) == 1:
        w = ["linux", *w]
    return h[: len(w)] == w or (len(w) == 2 and h[:2] == w)


@dataclass
class _Choice:
    layers: list[Blob]
    platform: str | None
    name: str | None


def _oci_manifests(src: _Source, desc: dict[str, Any], depth: int, ref: str | None) -> list[_Choice]:
    if depth > MAX_NESTING:
        raise ImageError("image indexes nested too deeply (a loop?)")
    mt = desc.get("mediaType", "")
    ann = desc.get("annotations") or {}
    ref = ann.get("org.opencontainers.image.ref.name") or ann.get("io.containerd.image.name") or ref
    if ann.get("vnd.docker.reference.type") == "attestation-manifest":
        return []
    name = _blob_name(desc.get("digest"))
    if not src.exists(name):
        return []  # a platform that was not saved
    doc = src.json(name)
    if not isinstance(doc, dict):
        raise ImageError(f"{name}: not a JSON object")
    if mt in INDEX_TYPES or (not mt and "manifests" in doc):
        out: list[_Choice] = []
        for d in doc.get("manifests") or []:
            if isinstance(d, dict):
                out += _oci_manifests(src, d, depth + 1, ref)
        return out
    if mt and mt not in MANIFEST_TYPES and "layers" not in doc:
        return []
    plat = _platform_str(desc.get("platform"))
    cfg = doc.get("config") or {}
    if plat is None and isinstance(cfg, dict) and src.exists(_blob_name(cfg.get("digest"))):
        c = src.json(_blob_name(cfg.get("digest")))
        plat = _platform_str(c) if isinstance(c, dict) else None
    if plat and plat.startswith("unknown/"):
        return []
    layers = []
    for ld in doc.get("layers") or []:
        if not isinstance(ld, dict):
            raise ImageError(f"{name}: bad layer descriptor")
        layers.append(src.blob(_blob_name(ld.get("digest")), str(ld.get("digest"))))
    return [_Choice(layers, plat, ref)]


def _legacy_manifests(src: _Source) -> list[_Choice]:
    doc = src.json("manifest.json")
    if not isinstance(doc, list):
        raise ImageError("manifest.json: not a list")
    out = []
    for m in doc:
        if not isinstance(m, dict) or not isinstance(m.get("Layers"), list):
            raise ImageError("manifest.json: entry without Layers")
        cfg: Any = {}
        if isinstance(m.get("Config"), str) and src.exists(safe_name(m["Config"]) or ""):
            cfg = src.json(safe_name(m["Config"]) or "")
        diff_ids = (cfg.get("rootfs") or {}).get("diff_ids") if isinstance(cfg, dict) else None
        layers = []
        for i, lp in enumerate(m["Layers"]):
            name = safe_name(str(lp))
            if name is None:
                raise ImageError(f"manifest.json: layer path {lp!r} leaves the archive")
            digest = _layer_digest(name, diff_ids, i, len(m["Layers"]))
            layers.append(src.blob(name, digest))
        tags = m.get("RepoTags") or []
        out.append(
            _Choice(
                layers, _platform_str(cfg) if isinstance(cfg, dict) else None, str(tags[0]) if tags else None
            )
        )
    return out


def _layer_digest(name: str, diff_ids: Any, i: int, n: int) -> str:
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "blobs":
        return f"{parts[1]}:{parts[2]}"
    if isinstance(diff_ids, list) and len(diff_ids) == n and isinstance(diff_ids[i], str):
        return diff_ids[i]
    return ""  # unknown: the layer is not cached


def open_image(path: str, platform: str | None = None) -> Image:
    """The layers of the image at ``path`` (see the module docstring)."""
    path = os.path.abspath(path)
    src = _Source(path)
    if src.exists("index.json"):
        idx = src.json("index.json")
        if not isinstance(idx, dict) or not isinstance(idx.get("manifests"), list):
            raise ImageError("index.json: no manifests list")
        choices = [
            c for d in idx["manifests"] if isinstance(d, dict) for c in _oci_manifests(src, d, 0, None)
        ]
    elif src.exists("manifest.json"):
        choices = _legacy_manifests(src)
    else:
        what = "folder" if src.is_dir else "tarball"
        raise ImageError(f"not an image {what}: neither index.json (OCI) nor manifest.json (docker save)")
    if not choices:
        raise ImageError("the image index lists no image whose manifest is present")
    if platform:
        choices = [c for c in choices if _platform_matches(c.platform, platform)] or _no_platform(
            choices, platform
        )
    if len({(c.platform, tuple(b.digest for b in c.layers)) for c in choices}) > 1:
        listed = ", ".join(f"{c.platform or '?'} ({c.name or 'unnamed'})" for c in choices)
        raise UsageError(
            f"{path} holds {len(choices)} images: {listed}",
            hint="pick one with --platform OS/ARCH[/VARIANT], e.g. --platform linux/arm64",
        )
    c = choices[0]
    return Image(path, c.layers, c.platform, c.name)


def _no_platform(choices: list[_Choice], platform: str) -> list[_Choice]:
    have = ", ".join(sorted({c.platform or "?" for c in choices}))
    raise UsageError(f"--platform {platform}: the image holds {have}")
