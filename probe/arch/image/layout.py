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

# ruff: noqa: PTH100, PTH112, PTH113, PTH116, PTH118, PTH120
# (paths stay str: the blob paths are joined and opened once each)

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from probe import safejson
from probe.arch.image.layers import HARDLINK, REGULAR, SYMLINK, Blob, LayerError, Member, TarStream, safe_name
from probe.arch.inputs import NotRegularFile, open_regular
from probe.arch.limits import (
    MAX_ARCHIVE_MEMBERS,
    MAX_DESCRIPTORS,
    MAX_INDEX_DEPTH,
    MAX_LAYERS,
    MAX_METADATA_JSON,
)
from probe.errors import UsageError
from probe.userfile import describe_mode

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


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
    """Named files of the image: members of a tarball (indexed by one pass over its headers), or
    files under a folder. Only regular files are read; metadata JSON is bounded in size and depth."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.is_dir = os.path.isdir(path)
        self._members: dict[str, Member] = {}
        self._json_read = 0  # metadata bytes parsed so far (bounded: a fan-out of big manifests)
        self._json: dict[str, Any] = {}  # small metadata files, parsed once however often named
        if not self.is_dir:
            self._index_tar()

    def _index_tar(self) -> None:
        try:
            fd = open_regular(self.path)
        except NotRegularFile as exc:
            raise ImageError(f"not an image tarball: {exc.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            tar = TarStream(fd, Blob(self.path, 0, size, ""), threads=False)
            if tar.compression:
                raise ImageError(f"a {tar.compression}-compressed tarball: decompress it first")
            for m in tar.members():
                if m.path is not None:
                    self._members[m.path] = m
                if len(self._members) > MAX_ARCHIVE_MEMBERS:
                    raise ImageError(f"more than {MAX_ARCHIVE_MEMBERS:,} members: not an image tarball")
        except LayerError as exc:
            raise ImageError(f"not an image tarball: {exc}") from None
        finally:
            os.close(fd)
        for m in self._members.values():
            if m.type == REGULAR and m.data_offset + m.size > size:
                raise ImageError(f"image tarball truncated: {m.name} extends past its end")

    def _resolve(self, name: str) -> Member | None:
        m = self._members.get(name)
        for _ in range(MAX_INDEX_DEPTH):  # docker save links duplicate layers to one copy
            if m is None or m.type not in (SYMLINK, HARDLINK):
                return m
            target = m.linkname if m.type == HARDLINK else os.path.join(os.path.dirname(name), m.linkname)
            name = safe_name(target) or ""
            m = self._members.get(name)
        raise ImageError(f"link loop at {name} in the image tarball")

    def exists(self, name: str) -> bool:
        if self.is_dir:
            return os.path.isfile(os.path.join(self.path, name))
        m = self._resolve(name)
        return m is not None and m.type == REGULAR

    def blob(self, name: str, digest: str, *, content_digest: bool = False) -> Blob:
        if self.is_dir:
            p = os.path.join(self.path, name)
            try:
                st = os.stat(p)
            except OSError:
                raise ImageError(f"blob {name} missing from the layout") from None
            what = describe_mode(st.st_mode)
            if what is not None:
                raise ImageError(f"blob {name} is {what}, not a regular file: not read")
            return Blob(p, 0, st.st_size, digest, content_digest)
        m = self._resolve(name)
        if m is None or m.type != REGULAR:
            raise ImageError(f"{name} missing from the image tarball")
        return Blob(self.path, m.data_offset, m.size, digest, content_digest)

    def json(self, name: str) -> Any:
        """A metadata file (a small one parsed once: later calls get the same document): at most
        ``MAX_METADATA_JSON`` bytes, and 4 times that for all the metadata read of the image."""
        if name in self._json:
            return self._json[name]
        b = self.blob(name, "")
        if b.size > MAX_METADATA_JSON:
            raise ImageError(
                f"{name}: {b.size} bytes, more than the {MAX_METADATA_JSON} read as image metadata"
            )
        self._json_read += b.size
        if self._json_read > 4 * MAX_METADATA_JSON:
            raise ImageError(
                f"more than {4 * MAX_METADATA_JSON >> 20} MiB of image metadata (manifests, configs, "
                "indexes) in all: not read further"
            )
        try:
            fd = open_regular(b.path)
        except NotRegularFile as exc:
            raise ImageError(f"{name}: {exc.strerror}") from None
        try:
            raw = os.pread(fd, b.size, b.offset)
        finally:
            os.close(fd)
        try:
            doc = safejson.loads(raw)
        except ValueError as exc:  # json.JSONDecodeError, safejson.JsonLimitError
            raise ImageError(f"{name} is not valid JSON: {exc}") from None
        if b.size <= 64 << 10:  # (a config named by every image: kept; big documents are not)
            self._json[name] = doc
        return doc


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


class _OciWalk:
    """The manifests an OCI index leads to, through nested indexes: at most ``MAX_INDEX_DEPTH``
    levels, each index blob read once (a loop or a fan-out of the same index costs nothing), at
    most ``MAX_DESCRIPTORS`` descriptors in all."""

    def __init__(self, src: _Source) -> None:
        self.src = src
        self.seen: set[str] = set()
        self.manifests: set[tuple[str, str | None, str | None]] = set()  # (blob, platform, ref) listed
        self.descriptors = 0

    def index(self, doc: dict[str, Any], depth: int, ref: str | None) -> list[_Choice]:
        manifests = doc.get("manifests")
        if not isinstance(manifests, list):
            return []
        self.descriptors += len(manifests)
        if self.descriptors > MAX_DESCRIPTORS:
            raise ImageError(f"the image indexes list more than {MAX_DESCRIPTORS} descriptors")
        return [c for d in manifests if isinstance(d, dict) for c in self.descriptor(d, depth, ref)]

    def descriptor(self, desc: dict[str, Any], depth: int, ref: str | None) -> list[_Choice]:
        if depth > MAX_INDEX_DEPTH:
            raise ImageError(f"image indexes nested more than {MAX_INDEX_DEPTH} levels deep (a loop?)")
        mt = desc.get("mediaType", "")
        ann = desc.get("annotations") or {}
        if not isinstance(ann, dict):
            ann = {}
        ref = ann.get("org.opencontainers.image.ref.name") or ann.get("io.containerd.image.name") or ref
        if ann.get("vnd.docker.reference.type") == "attestation-manifest":
            return []
        name = _blob_name(desc.get("digest"))
        if not self.src.exists(name):
            return []  # a platform that was not saved
        is_index = mt in INDEX_TYPES
        if is_index and name in self.seen:
            return []  # an index already walked: its manifests are listed once
        listed = (name, _platform_str(desc.get("platform")), ref)
        if not is_index and listed in self.manifests:
            return []  # the same manifest, listed again the same way: one choice (a fan-out is free)
        doc = self.src.json(name)
        if not isinstance(doc, dict):
            raise ImageError(f"{name}: not a JSON object")
        if is_index or (not mt and "manifests" in doc):
            self.seen.add(name)
            return self.index(doc, depth + 1, ref)
        if mt and mt not in MANIFEST_TYPES and "layers" not in doc:
            return []
        self.manifests.add(listed)
        choice = self.manifest(name, doc, desc, ref)
        return [] if choice.platform and choice.platform.startswith("unknown/") else [choice]

    def manifest(self, name: str, doc: dict[str, Any], desc: dict[str, Any], ref: str | None) -> _Choice:
        plat = _platform_str(desc.get("platform"))
        cfg = doc.get("config") or {}
        if plat is None and isinstance(cfg, dict) and self.src.exists(_blob_name(cfg.get("digest"))):
            c = self.src.json(_blob_name(cfg.get("digest")))
            plat = _platform_str(c) if isinstance(c, dict) else None
        layers = doc.get("layers") or []
        if not isinstance(layers, list) or len(layers) > MAX_LAYERS:
            raise ImageError(f"{name}: not a list of at most {MAX_LAYERS} layers")
        blobs = []
        for ld in layers:
            if not isinstance(ld, dict):
                raise ImageError(f"{name}: bad layer descriptor")
            blobs.append(self.src.blob(_blob_name(ld.get("digest")), str(ld.get("digest"))))
        return _Choice(blobs, plat, ref)


def _legacy_manifests(src: _Source) -> list[_Choice]:
    doc = src.json("manifest.json")
    if not isinstance(doc, list):
        raise ImageError("manifest.json: not a list")
    if len(doc) > MAX_DESCRIPTORS:
        raise ImageError(f"manifest.json: more than {MAX_DESCRIPTORS} images")
    out = []
    listed: set[str] = set()
    for m in doc:
        if not isinstance(m, dict) or not isinstance(m.get("Layers"), list):
            raise ImageError("manifest.json: entry without Layers")
        if len(m["Layers"]) > MAX_LAYERS:
            raise ImageError(f"manifest.json: an image of more than {MAX_LAYERS} layers")
        key = repr((m["Layers"], m.get("Config"), m.get("RepoTags")))
        if key in listed:
            continue  # the same image listed again: one choice
        listed.add(key)
        cfg: Any = {}
        if isinstance(m.get("Config"), str) and src.exists(safe_name(m["Config"]) or ""):
            cfg = src.json(safe_name(m["Config"]) or "")
        rootfs = cfg.get("rootfs") if isinstance(cfg, dict) else None
        diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
        layers = []
        for i, lp in enumerate(m["Layers"]):
            name = safe_name(str(lp))
            if name is None:
                raise ImageError(f"manifest.json: layer path {lp!r} leaves the archive")
            digest, of_content = _layer_digest(name, diff_ids, i, len(m["Layers"]))
            layers.append(src.blob(name, digest, content_digest=of_content))
        tags = m.get("RepoTags")
        tag = str(tags[0]) if isinstance(tags, list) and tags else None
        out.append(_Choice(layers, _platform_str(cfg) if isinstance(cfg, dict) else None, tag))
    return out


def _layer_digest(name: str, diff_ids: Any, i: int, n: int) -> tuple[str, bool]:
    """(digest, whether it is that of the uncompressed tar): a ``blobs/ALG/HEX`` member is its own
    digest; a ``<id>/layer.tar`` has its ``diff_id`` from the config; else none (not cached)."""
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "blobs":
        return f"{parts[1]}:{parts[2]}", False
    if isinstance(diff_ids, list) and len(diff_ids) == n and isinstance(diff_ids[i], str):
        return diff_ids[i], True
    return "", False


def open_image(path: str, platform: str | None = None) -> Image:
    """The layers of the image at ``path`` (see the module docstring)."""
    path = os.path.abspath(path)
    src = _Source(path)
    if src.exists("index.json"):
        idx = src.json("index.json")
        if not isinstance(idx, dict) or not isinstance(idx.get("manifests"), list):
            raise ImageError("index.json: no manifests list")
        choices = _OciWalk(src).index(idx, 0, None)
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
