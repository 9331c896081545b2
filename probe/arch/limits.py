"""The bounds every ``probe scan`` input is read within, in one place (README, "Security").

Images, wheels and files come from anywhere (third-party base images, wheels from any index), so
each reader works within these limits; an input past one gets a record with an ``error`` that
names the limit (exit 5), never an unbounded buffer, an endless loop or a traceback:

- memory: one member is held in memory at most :data:`MAX_HELD` bytes (a bare cubin / fatbin of a
  compressed layer, a deflated wheel member, a fatbin entry's payload, everything ``--kernels``
  reads); larger host ELFs are streamed header by header; inflating runs in pieces of a few MiB.
- expansion: a compressed stream (a layer, a wheel's device-code members) that inflates more than
  :data:`MAX_EXPANSION` times its compressed size, past a floor, is a decompression bomb (real
  layers and wheels: 2 to 12 times; deflate reaches ~1030 times, zstd far more).
- fan-out: image indexes nest :data:`MAX_INDEX_DEPTH` levels at most, each index blob is read
  once, and an image lists at most :data:`MAX_DESCRIPTORS` descriptors and :data:`MAX_LAYERS`
  layers; metadata JSON is at most :data:`MAX_METADATA_JSON` bytes a file (4 times that in all) and
  nested at most
  :data:`probe.safejson.MAX_DEPTH` levels; an archive lists at most :data:`MAX_ARCHIVE_MEMBERS`.
- whole images: the layers of one image hold :data:`MAX_IMAGE_MEMBERS` members in all and inflate at
  most :data:`MAX_EXPANSION` times their compressed size together (past
  :data:`IMAGE_EXPANSION_FLOOR`: a hundred small bombs are one bomb); a layer listed several times
  is read once; member names and link targets are at most :data:`MAX_PATH` bytes (and
  :data:`MAX_PATH_DEPTH` folders deep), the extension
  headers before one member :data:`MAX_EXTENSIONS` bytes in all.
"""

from __future__ import annotations

#: bytes of one member (or payload) held in memory at once
MAX_HELD = 256 << 20
#: inflated / compressed bytes beyond which a stream is a decompression bomb ...
MAX_EXPANSION = 100
#: ... once a wheel's device-code members inflate to more than this in all
WHEEL_EXPANSION_FLOOR = 256 << 20
#: ... once a layer has inflated more than this
LAYER_EXPANSION_FLOOR = 1 << 30
#: image metadata (index.json, manifest.json, manifests, configs)
MAX_METADATA_JSON = 16 << 20
MAX_INDEX_DEPTH = 8
MAX_DESCRIPTORS = 4096
MAX_LAYERS = 512
#: members of an image tarball or a wheel (each costs a few hundred bytes of index)
MAX_ARCHIVE_MEMBERS = 500_000
#: members of all the layers of one image together (the final tree is held as an index of paths)
MAX_IMAGE_MEMBERS = 1_000_000
#: a member name or link target in a layer (Linux's PATH_MAX; beyond it a name is no path), and the
#: folders it lies in (each visibility check of a member looks at each of its folders once)
MAX_PATH = 4096
MAX_PATH_DEPTH = 256
#: tar extension headers (pax, GNU long names) before one member, in all
MAX_EXTENSIONS = 1 << 20
#: the whole image: its compressed layers may inflate MAX_EXPANSION times their size in all, past this
IMAGE_EXPANSION_FLOOR = 1 << 30


def size_text(n: int) -> str:
    """``n`` bytes as text for messages: ``"256 MiB"``, ``"1.5 GiB"``, ``"12 KiB"``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.1f} {unit}" if v < 10 and v != int(v) else f"{v:,.0f} {unit}"
    return f"{n} bytes"
