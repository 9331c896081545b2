"""Build container images without a Docker daemon: spec-conformant OCI image layouts (folder or
tarball) and ``docker save`` legacy tarballs, from layers given as member lists or folders.

Used by tests/arch/test_image*.py and benchmarks/bench_image.py. Only the standard library
(tarfile, hashlib, gzip) and zstandard. ``apply_layers`` is an independent reference unpacker
(tarfile extraction + whiteout rules of the OCI image spec) for the "same as unpacked" checks.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# a layer member: (name, data) for a file, or (name, "->", target) symlink, (name, "=>", target)
# hard link, (name, "/") folder; names are written as given (absolute, "..": bad-input tests)
Member = tuple


@dataclass
class LayerBlob:
    path: Path  # the blob file (compressed or not)
    digest: str  # sha256 of the blob
    diff_id: str  # sha256 of the uncompressed tar
    size: int
    media_type: str


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(4 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def tar_members(out: Path, members: Iterable[Member]) -> None:
    """An uncompressed layer tar holding ``members`` (see :data:`Member`)."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        for m in members:
            ti = tarfile.TarInfo(m[0])
            ti.mtime = 1_700_000_000
            if len(m) == 2 and m[1] == "/":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            elif len(m) == 3 and m[1] in ("->", "=>"):
                ti.type = tarfile.SYMTYPE if m[1] == "->" else tarfile.LNKTYPE
                ti.linkname = m[2]
                tf.addfile(ti)
            else:
                data = m[1] if isinstance(m[1], bytes) else Path(m[1]).read_bytes()
                ti.size, ti.mode = len(data), 0o755
                tf.addfile(ti, io.BytesIO(data))


def tar_tree(out: Path, root: Path, arcprefix: str = "") -> None:
    """An uncompressed layer tar of the folder ``root`` (its contents under ``arcprefix``)."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                full = os.path.join(dirpath, name)
                arc = os.path.normpath(os.path.join(arcprefix, rel, name))
                tf.add(full, arcname=arc, recursive=False)
            if rel != ".":
                tf.add(dirpath, arcname=os.path.normpath(os.path.join(arcprefix, rel)), recursive=False)


def compress(tar_path: Path, compression: str | None, level: int = 1) -> LayerBlob:
    """Turn an uncompressed layer tar into a blob (gzip / zstd / none), with its digests."""
    diff_id = _sha256_file(tar_path)
    if compression is None:
        blob, mt = tar_path, "application/vnd.oci.image.layer.v1.tar"
    elif compression == "gzip":
        blob, mt = tar_path.with_suffix(".tar.gz"), "application/vnd.oci.image.layer.v1.tar+gzip"
        with open(tar_path, "rb") as src, open(blob, "wb") as dst:
            z = zlib.compressobj(level, zlib.DEFLATED, 31)
            for block in iter(lambda: src.read(4 << 20), b""):
                dst.write(z.compress(block))
            dst.write(z.flush())
        tar_path.unlink()
    else:
        import zstandard

        blob, mt = tar_path.with_suffix(".tar.zst"), "application/vnd.oci.image.layer.v1.tar+zstd"
        with open(tar_path, "rb") as src, open(blob, "wb") as dst:
            zstandard.ZstdCompressor(level=level, threads=0).copy_stream(src, dst)
        tar_path.unlink()
    return LayerBlob(blob, _sha256_file(blob), diff_id, blob.stat().st_size, mt)


def _put_blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest.split(":")[1]).write_bytes(data)
    return digest, len(data)


def _config(layers: list[LayerBlob], platform: str) -> bytes:
    os_, arch = platform.split("/")[:2]
    cfg = {
        "architecture": arch,
        "os": os_,
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [b.diff_id for b in layers]},
    }
    return json.dumps(cfg).encode()


def oci_manifest(blobs: Path, layers: list[LayerBlob], platform: str) -> dict[str, object]:
    """Write config + manifest blobs (layers must already be in ``blobs``); the descriptor."""
    cd, cs = _put_blob(blobs, _config(layers, platform))
    man = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
        "layers": [{"mediaType": b.media_type, "digest": b.digest, "size": b.size} for b in layers],
    }
    md, ms = _put_blob(blobs, json.dumps(man).encode())
    os_, arch = platform.split("/")[:2]
    return {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": md,
        "size": ms,
        "platform": {"os": os_, "architecture": arch},
    }


def write_oci_layout(
    out: Path, images: dict[str, list[LayerBlob]], *, nested: bool = False, move: bool = False
) -> Path:
    """An OCI image layout folder; ``images``: platform -> layers (several: an image index).
    ``nested``: index.json points at an image index blob that lists the manifests."""
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    descs = []
    for platform, layers in images.items():
        for b in layers:
            dest = blobs / b.digest.split(":")[1]
            if not dest.exists():
                (shutil.move if move else shutil.copyfile)(b.path, dest)
        descs.append(oci_manifest(blobs, layers, platform))
    if nested:
        idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": descs}
        d, s = _put_blob(blobs, json.dumps(idx).encode())
        descs = [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": d, "size": s}]
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": descs}
    (out / "index.json").write_text(json.dumps(index))
    (out / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    return out


def tar_folder(folder: Path, out: Path) -> Path:
    """A tarball of a layout folder (``oci-archive:`` / ``docker save`` of Docker ≥ 25)."""
    with tarfile.open(out, "w") as tf:
        for p in sorted(folder.rglob("*")):
            tf.add(p, arcname=str(p.relative_to(folder)), recursive=False)
    return out


def write_docker_save(
    out: Path,
    layers: list[LayerBlob],
    *,
    tag: str = "probe/test:latest",
    platform: str = "linux/amd64",
    duplicate_link: bool = False,
) -> Path:
    """A legacy ``docker save`` tarball: ``<id>/layer.tar`` + ``<config>.json`` + ``manifest.json``.
    ``duplicate_link``: the last layer is stored as a tar symlink to the first (as docker does
    for identical layers)."""
    cfg = _config(layers, platform)
    cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
    names = []
    with tarfile.open(out, "w") as tf:
        for i, b in enumerate(layers):
            lid = hashlib.sha256(f"{i}{b.diff_id}".encode()).hexdigest()
            name = f"{lid}/layer.tar"
            if duplicate_link and i == len(layers) - 1 and i > 0:
                ti = tarfile.TarInfo(name)
                ti.type, ti.linkname = tarfile.SYMTYPE, f"../{names[0].split('/')[0]}/layer.tar"
                tf.addfile(ti)
            else:
                tf.add(b.path, arcname=name)
            names.append(name)
        for name, data in (
            (cfg_name, cfg),
            (
                "manifest.json",
                json.dumps([{"Config": cfg_name, "RepoTags": [tag], "Layers": names}]).encode(),
            ),
        ):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return out


def apply_layers(layer_tars: list[Path], root: Path) -> None:
    """Reference unpacker: extract uncompressed layer tars in order with the OCI whiteout rules."""
    root.mkdir(parents=True, exist_ok=True)
    for lt in layer_tars:
        with tarfile.open(lt, "r:*") as tf:
            members = tf.getmembers()
            for m in members:  # whiteouts first: they apply to the layers below only
                d, base = os.path.split(m.name)
                if base == ".wh..wh..opq":
                    target = root / d
                    if target.is_dir():
                        for child in target.iterdir():
                            _remove(child)
                elif base.startswith(".wh."):
                    _remove(root / d / base[4:])
            rest = [m for m in members if not os.path.basename(m.name).startswith(".wh.")]
            for m in rest:
                dest = root / m.name
                if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
                    dest.unlink()
                elif dest.is_dir() and not m.isdir():
                    shutil.rmtree(dest)
            tf.extractall(root, members=rest, filter="tar")


def _remove(p: Path) -> None:
    if p.is_symlink() or p.is_file():
        p.unlink()
    elif p.is_dir():
        shutil.rmtree(p)
