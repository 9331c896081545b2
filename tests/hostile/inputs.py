"""Hostile inputs, generated: decompression bombs (gzip layers, zip members), images that claim a
digest they do not have, nested and fanned-out image indexes, JSON nested thousands of levels
deep, FIFOs where files are expected, and matrices of any size.

Everything is written with the standard library (plus the test image builder); bombs are written
as repeated compressed blocks, so a multi-GB member costs a few MB of disk and well under a second.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import tarfile
import zlib
from pathlib import Path

from tests.arch.image_build import compress, tar_members, write_oci_layout

ROOT = Path(__file__).resolve().parents[2]
PREBUILT = ROOT / "tests" / "fixtures" / "cuda" / "prebuilt"
MATRIX = ROOT / "tests" / "matrix" / "data" / "baseline.json"

EM_CUDA = 190
EM_X86_64 = 62
_BLOCK = 1 << 20


def elf_head(machine: int, *, shoff: int = 0) -> bytes:
    """A 64-byte ELF header (64-bit, little endian) for ``machine``, the section table at ``shoff``."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x41, 8]) + b"\0" * 7
    return struct.pack("<16sHHIQQQIHHHHHH", ident, 2, machine, 1, 0, 0, shoff, 0, 64, 56, 0, 64, 0, 0)


def deflated_zeros(head: bytes, total: int, wbits: int) -> tuple[bytes, int]:
    """A deflate stream (``wbits``: 31 gzip, -15 raw) of ``head`` followed by zeros up to ``total``
    bytes, and the CRC-32 of those bytes. Zeros are written as one full-flushed block repeated."""
    z = zlib.compressobj(9, zlib.DEFLATED, wbits)
    out = [z.compress(head), z.flush(zlib.Z_FULL_FLUSH)]
    crc = zlib.crc32(head)
    left = total - len(head)
    zeros = bytes(_BLOCK)
    block = z.compress(zeros) + z.flush(zlib.Z_FULL_FLUSH)  # the same bytes every time after a full flush
    blocks, tail = divmod(left, _BLOCK)
    out.append(block * blocks)
    for _ in range(blocks):
        crc = zlib.crc32(zeros, crc)
    # the compressor's own state has seen only one block: end the stream by hand for gzip
    out.append(z.compress(bytes(tail)))
    out.append(z.flush())
    data = b"".join(out)
    crc = zlib.crc32(bytes(tail), crc)
    if wbits == 31:  # replace the trailer zlib computed (it saw one block) with the real one
        data = data[:-8] + struct.pack("<II", crc & 0xFFFFFFFF, total & 0xFFFFFFFF)
    return data, crc & 0xFFFFFFFF


def _tar_header(name: str, size: int) -> bytes:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = size, 0o644, 1_700_000_000
    return ti.tobuf(format=tarfile.GNU_FORMAT)


def gzip_bomb_layer(out: Path, member: str, size: int, head: bytes) -> Path:
    """A gzip-compressed layer tar holding one member of ``size`` bytes (``head`` + zeros)."""
    hdr = _tar_header(member, size)
    pad = (-size) % 512
    # tar header + member bytes + padding + end-of-archive, all through one gzip stream
    whole = size + len(hdr) + pad + 1024
    body, _crc = deflated_zeros(hdr + head, whole, 31)
    out.write_bytes(body)
    return out


def oci_with_layer_blob(
    out: Path, blob: Path, media: str = "application/vnd.oci.image.layer.v1.tar+gzip"
) -> Path:
    """An OCI layout folder with one image whose only layer is the file ``blob`` (its true digest)."""
    from tests.arch.image_build import LayerBlob

    digest = "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest()
    lb = LayerBlob(blob, digest, digest, blob.stat().st_size, media)
    return write_oci_layout(out, {"linux/amd64": [lb]})


def wheel_with_member(out: Path, member: str, size: int, head: bytes) -> Path:
    """A wheel (``out`` must be named like one) holding ``member``: ``head`` + zeros, deflated."""
    data, crc = deflated_zeros(head, size, -15)
    wheel_meta = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
    dist = out.name.split("-")[0] + "-" + out.name.split("-")[1] + ".dist-info/WHEEL"
    entries = [(dist, zlib.crc32(wheel_meta), wheel_meta, len(wheel_meta), 0), (member, crc, data, size, 8)]
    with open(out, "wb") as f:
        central = b""
        for name, c, payload, usize, method in entries:
            off = f.tell()
            nb = name.encode()
            f.write(
                struct.pack(
                    "<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, c, len(payload), usize, len(nb), 0
                )
            )
            f.write(nb + payload)
            central += struct.pack(
                "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, c, len(payload), usize, len(nb),
                0, 0, 0, 0, 0, off,
            ) + nb  # fmt: skip
        cd_off = f.tell()
        f.write(central)
        f.write(
            struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), cd_off, 0)
        )
    return out


def layer(tmp: Path, name: str, members: list[tuple], compression: str | None = "gzip"):  # type: ignore[no-untyped-def]
    """A layer blob (LayerBlob) from members (see tests/arch/image_build.py)."""
    t = tmp / f"{name}.tar"
    tar_members(t, members)
    return compress(t, compression)


def deep_json(depth: int, inner: object = 0) -> str:
    """``[[[…inner…]]]`` nested ``depth`` levels."""
    return "[" * depth + json.dumps(inner) + "]" * depth


def fanout_index_layout(out: Path, fanout: int, depth: int) -> Path:
    """An OCI layout whose index.json lists ``fanout`` times one index blob, which lists ``fanout``
    times the next ... ``depth`` levels down (every walk of it as a tree visits fanout**depth nodes)."""
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    media = "application/vnd.oci.image.index.v1+json"
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
    cd = hashlib.sha256(cfg.encode()).hexdigest()
    (blobs / cd).write_text(cfg)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": f"sha256:{cd}"},
        "layers": [],
    }
    raw = json.dumps(manifest).encode()
    d = hashlib.sha256(raw).hexdigest()
    (blobs / d).write_bytes(raw)
    desc = {"mediaType": manifest["mediaType"], "digest": f"sha256:{d}", "size": len(raw)}
    for _ in range(depth):
        idx = {"schemaVersion": 2, "mediaType": media, "manifests": [desc] * fanout}
        raw = json.dumps(idx).encode()
        d = hashlib.sha256(raw).hexdigest()
        (blobs / d).write_bytes(raw)
        desc = {"mediaType": media, "digest": f"sha256:{d}", "size": len(raw)}
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc] * fanout}))
    (out / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return out


def matrix_doc(cells: int, *, base: Path = MATRIX, pad: int = 0) -> dict:
    """A valid matrix of ``cells`` cells, cycling the cells of ``base`` under new ids (each
    ``log_excerpt`` padded by ``pad`` characters, to reach a size)."""
    doc = json.loads(base.read_text())
    src = doc["cells"]
    out = []
    for i in range(cells):
        c = dict(src[i % len(src)])
        c["id"] = f"{c['id']}#{i // len(src)}"
        if pad:
            c["log_excerpt"] = (c.get("log_excerpt") or "") + "x" * pad
        out.append(c)
    doc["cells"] = out
    return doc


def write_big_matrix(path: Path, megabytes: int, *, base: Path = MATRIX, flip_every: int = 0) -> int:
    """A matrix file of about ``megabytes`` MB written as probe writes one (indent 1), cell by cell;
    ``flip_every``: every n-th ok cell becomes ``crashed``. Returns the number of cells."""
    doc = json.loads(base.read_text())
    src = doc.pop("cells")
    target = megabytes * 1_000_000
    head = json.dumps(doc, indent=1)
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(head[: head.rfind("}")].rstrip() + ',\n "cells": [\n')
        size = 0
        while size < target:
            c = dict(src[n % len(src)])
            c["id"] = f"{c['id']}#{n // len(src)}"
            if flip_every and c.get("outcome") == "ok" and n % flip_every == 0:
                c["outcome"] = "crashed"
            text = json.dumps(c, indent=1).replace("\n", "\n  ")
            f.write((",\n  " if n else "  ") + text)
            size += len(text)
            n += 1
        f.write("\n ]\n}\n")
    return n


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def tar_bytes(members: dict[str, bytes]) -> bytes:
    """A small plain tar in memory (for property tests)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()
