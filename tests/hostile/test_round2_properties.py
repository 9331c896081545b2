"""Property tests of the second round's readers: the central-directory count agrees with zipfile on
every valid zip and never raises a stray exception on a mutated one; string-table names read in one
pass equal names read one by one; the sanitiser leaves nothing a terminal acts on and keeps JSON the
same document; the bounded reader refuses anything but valid bounded JSON with one error type."""

from __future__ import annotations

import io
import json
import zipfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe.arch.bytesource import names_at
from probe.arch.image.layers import safe_name
from probe.arch.zipmember import MemberError, central_directory_count
from probe.errors import BadInputError
from probe.textsafe import UNSAFE, clean
from probe.userfile import read_json

_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_names = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=20)


def _zip_bytes(names: list[str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n in dict.fromkeys(names):
            z.writestr(n, n.encode())
    return buf.getvalue()


@_SETTINGS
@given(st.lists(_names, min_size=1, max_size=30))
def test_central_directory_count_agrees_with_zipfile(tmp_path, names):
    p = tmp_path / "a.zip"
    p.write_bytes(_zip_bytes(names))
    assert central_directory_count(str(p), 10**6) == len(zipfile.ZipFile(p).infolist())


@_SETTINGS
@given(st.lists(_names, min_size=1, max_size=10), st.data())
def test_central_directory_count_on_mutated_zips(tmp_path, names, data):
    raw = bytearray(_zip_bytes(names))
    for _ in range(data.draw(st.integers(1, 8))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    p = tmp_path / "m.zip"
    p.write_bytes(bytes(raw))
    try:
        n = central_directory_count(str(p), 1000)
    except MemberError:
        return
    assert 0 <= n <= 1001


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(-5, 250), max_size=40), st.integers(0, 50))
def test_names_read_in_one_pass_equal_names_read_one_by_one(table, offsets, max_len):
    got = names_at(table, 0, len(table), offsets, max_len, "symbol table")
    for off in offsets:
        if off < 0 or off >= len(table):
            continue
        end = table.find(b"\0", off)
        if end < 0 or end - off > max_len:
            assert off not in got
        else:
            assert got[off] == table[off:end].decode("utf-8", "replace")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_the_sanitiser_leaves_no_control_and_keeps_json(text):
    out = clean(text)
    assert not UNSAFE.search(out)
    assert clean(out) == out
    assert json.loads(clean(json.dumps({"k": text}, ensure_ascii=False))) == {"k": text}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "..", ".", "", "b" * 50]), max_size=200))
def test_safe_names_are_bounded(parts):
    name = "/".join(parts)
    got = safe_name(name)
    if got is not None:
        assert len(got) <= 4096 and got.count("/") < 256 and ".." not in got.split("/")


@_SETTINGS
@given(st.binary(max_size=300))
def test_the_bounded_reader_raises_one_error_type(tmp_path, data):
    p = tmp_path / "x.json"
    p.write_bytes(data)
    try:
        read_json(p, what="file", limit=200)
    except BadInputError:
        pass
