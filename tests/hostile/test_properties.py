"""Property tests (hypothesis) over the readers of untrusted bytes: whatever the input, the tar /
OCI / zip / JSON readers answer with their own error type (a record, exit 5 or 6), never another
exception; and where the input is valid, the streamed JSON reading equals ``json.loads``."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe import safejson
from probe.arch.image.layers import Blob, LayerError, TarStream
from probe.errors import BadInputError
from tests.hostile.inputs import MATRIX, PREBUILT, tar_bytes

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
CUBIN = (PREBUILT / "sm_90a.cubin").read_bytes()


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    b = bytearray(data)
    for pos, val in edits:
        if b:
            b[pos % len(b)] = val
    return bytes(b[:cut] if cut is not None else b)


edits = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=8)
cuts = st.one_of(st.none(), st.integers(0, 4096))


def _read_layer(tmp_path: Path, data: bytes) -> None:
    """Every member of ``data`` read as a layer: a LayerError is the only failure allowed."""
    p = tmp_path / "layer"
    p.write_bytes(data)
    fd = os.open(p, os.O_RDONLY)
    try:
        tar = TarStream(fd, Blob(str(p), 0, len(data), ""), threads=False)
        try:
            list(tar.members())
        except LayerError:
            pass
        finally:
            tar.close()
    finally:
        os.close(fd)


@SETTINGS
@given(data=st.binary(max_size=4096))
def test_tar_stream_on_any_bytes(tmp_path, data):
    _read_layer(tmp_path, data)


@SETTINGS
@given(e=edits, cut=cuts, gz=st.booleans())
def test_tar_stream_on_damaged_layers(tmp_path, e, cut, gz):
    import gzip

    raw = tar_bytes({"usr/lib/a.cubin": CUBIN, "x/" + "n" * 150: b"long name"})
    data = _mutate(gzip.compress(raw) if gz else raw, e, cut)
    _read_layer(tmp_path, data)


def _oci_tarball(tmp: Path) -> bytes:
    from tests.arch.image_build import tar_folder, write_oci_layout
    from tests.hostile.inputs import layer

    lay = layer(tmp, "l", [("usr/lib/a.cubin", PREBUILT / "sm_90a.cubin")])
    folder = write_oci_layout(tmp / "oci", {"linux/amd64": [lay]})
    return tar_folder(folder, tmp / "img.tar").read_bytes()


@pytest.fixture(scope="module")
def oci_bytes(tmp_path_factory) -> bytes:  # type: ignore[no-untyped-def]
    return _oci_tarball(tmp_path_factory.mktemp("oci"))


@SETTINGS
@given(e=edits, cut=cuts)
def test_image_scan_on_damaged_oci_tarballs(tmp_path, oci_bytes, e, cut):
    """Any damage to an OCI tarball: records with errors (or a usage error naming the platforms),
    never another exception."""
    from probe.arch.image import scan_image
    from probe.errors import UsageError

    p = tmp_path / "img.tar"
    p.write_bytes(_mutate(oci_bytes, e, cut))
    try:
        res = scan_image(str(p), use_cache=False)
    except UsageError:
        return
    assert all(isinstance(f.error, (str, type(None))) for f in res.files)


@pytest.mark.slow
@SETTINGS
@given(
    index=st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20)),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(
                st.sampled_from(
                    ["manifests", "digest", "mediaType", "layers", "platform", "annotations", "config"]
                ),
                children,
                max_size=5,
            ),
        ),
        max_leaves=30,
    )
)
def test_image_layout_on_any_index_json(tmp_path, index):
    """index.json of any JSON shape: an image error record or a usage error, nothing else."""
    from probe.arch.image import scan_image
    from probe.errors import UsageError

    d = tmp_path / "oci"
    (d / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (d / "oci-layout").write_text("{}")
    (d / "index.json").write_text(json.dumps(index))
    try:
        res = scan_image(str(d), use_cache=False)
    except UsageError:
        return
    assert all(f.error for f in res.files)


@pytest.fixture(scope="module")
def wheel_bytes(tmp_path_factory) -> bytes:  # type: ignore[no-untyped-def]
    p = tmp_path_factory.mktemp("whl") / "w-1.0-py3-none-any.whl"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("w-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        z.write(PREBUILT / "multi.so", "w/multi.so")
        z.write(PREBUILT / "sm_90a.cubin", "w/k.cubin")
    return p.read_bytes()


@SETTINGS
@given(e=edits, cut=st.one_of(st.none(), st.integers(0, 200_000)))
def test_wheel_scan_on_damaged_zips(tmp_path, wheel_bytes, e, cut):
    from probe.arch.wheel import scan_wheel

    p = tmp_path / "w-1.0-py3-none-any.whl"
    p.write_bytes(_mutate(wheel_bytes, e, cut))
    recs = scan_wheel(str(p))
    assert recs and all(isinstance(r.error, (str, type(None))) for r in recs)


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=25,
)


def _nesting(v: object) -> int:
    """Levels of arrays / objects in ``v`` (0 for a scalar)."""
    if isinstance(v, dict):
        return 1 + max(map(_nesting, v.values()), default=0)
    if isinstance(v, list):
        return 1 + max(map(_nesting, v), default=0)
    return 0


@SETTINGS
@given(value=json_values, depth=st.integers(0, 400))
def test_safejson_depth_limit(value, depth):
    """Nested within the limit: ``json.loads``'s answer; deeper: JsonLimitError, never RecursionError."""
    text = "[" * depth + json.dumps(value) + "]" * depth
    try:
        got = safejson.loads(text)
    except safejson.JsonLimitError:
        assert depth + _nesting(value) > safejson.MAX_DEPTH
        return
    assert depth + _nesting(value) <= safejson.MAX_DEPTH
    assert got == json.loads(text)


@pytest.mark.parametrize("wrap", [("[", "]"), ('{"a": ', "}")])
def test_safejson_limit_is_exact(wrap):
    """MAX_DEPTH levels of arrays or objects read; one more is refused."""
    opener, closer = wrap
    inner = '[{"b": [1, {}], "c": "]]]}}}"}]'  # 4 levels (the {} in the list), closers inside a string
    for extra, ok in ((safejson.MAX_DEPTH - 4, True), (safejson.MAX_DEPTH - 3, False)):
        text = opener * extra + inner + closer * extra
        if ok:
            assert safejson.loads(text) == json.loads(text)
        else:
            with pytest.raises(safejson.JsonLimitError):
                safejson.loads(text)


@SETTINGS
@given(
    extra=st.dictionaries(st.sampled_from(["note", "host", "platform"]), st.text(max_size=30), max_size=3),
    causes=st.lists(st.text(max_size=40), max_size=6),
    indent=st.sampled_from([None, 1, 2, "\t"]),
    cells=st.integers(0, 6),
)
def test_streamed_matrix_equals_json_loads(tmp_path, extra, causes, indent, cells):
    """A valid matrix, in any layout, any text in it (non-ASCII too: the cells are found again by
    byte offset): the streamed reading gives the cells ``json.loads`` gives, and writes back what
    ``json.dumps`` writes."""
    from probe.matrix.io import dump_document, load_document
    from probe.matrix.schema import Matrix

    doc = json.loads(MATRIX.read_text())
    doc["cells"] = (doc["cells"] * 2)[:cells]
    for i, c in enumerate(doc["cells"]):
        c["id"] = f"{c['id']}-{i}"
        if i < len(causes):
            c["root_cause"] = causes[i]
    doc["provenance"].update(extra)
    p = tmp_path / "m.json"
    p.write_text(json.dumps(doc, indent=indent, ensure_ascii=indent is None), encoding="utf-8")
    whole = Matrix.model_validate(doc)
    lazy = load_document(p)
    assert lazy == whole and list(lazy.cells) == whole.cells  # type: ignore[union-attr]
    assert dump_document(lazy) == json.dumps(whole.model_dump(mode="json"), indent=1) + "\n"


@SETTINGS
@given(e=edits, cut=st.one_of(st.none(), st.integers(0, 20_000)))
def test_matrix_reader_on_damaged_files(tmp_path, e, cut):
    """Damaged matrix bytes: BadInputError (exit 6), never another exception."""
    from probe.matrix.io import load_document

    p = tmp_path / "m.json"
    p.write_bytes(_mutate(MATRIX.read_bytes(), e, cut))
    try:
        doc = load_document(p)
        list(doc.cells)  # type: ignore[union-attr]
    except BadInputError:
        pass


@SETTINGS
@given(
    headers=st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=8),
        min_size=1,
        max_size=4,
    ),
    data=st.data(),
    fmt=st.sampled_from(["simple", "github"]),
)
def test_text_table_lays_out_as_tabulate(headers, data, fmt):
    from tabulate import tabulate

    from probe.matrix.table import text_table

    rows = data.draw(
        st.lists(
            st.lists(
                st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=10),
                min_size=len(headers),
                max_size=len(headers),
            ),
            max_size=5,
        )
    )
    assert text_table(headers, rows, fmt) == tabulate(
        rows, headers=headers, tablefmt=fmt, disable_numparse=True
    )


def test_tar_bytes_helper_roundtrip():
    raw = tar_bytes({"a": b"1"})
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        assert tf.getnames() == ["a"]
