"""Hypothesis: mutated real fixtures never make the parser raise or loop (bounded per input)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe.arch import elf, fatbin
from probe.arch.describe import describe
from probe.arch.elfstream import ForwardReader
from probe.arch.jsonout import dumps
from probe.arch.records import FileRecord
from tests.arch import synth

SEEDS = ("speed.fatbin", "size.fatbin", "sm_90a.cubin", "sm_100f.cubin", "rdc.so", "none.so", "k110a.ptx")
FUZZ = settings(
    max_examples=150,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def seeds(cuda_fixtures) -> dict[str, bytes]:
    out = {n: cuda_fixtures.path(n).read_bytes() for n in SEEDS}
    out["synthetic"] = synth.container(
        synth.concatenated([(2, 100, 0x1100011)]),
        synth.entry(1, 90, major=9, minor=0),
        synth.entry(2, 86, b"x" * 24, flags=0x2011, csize=20, usize=100),
    )
    return out


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None, hot: int) -> bytes:
    b = bytearray(data)
    # "hot" edits hit headers, where parsers break: the ELF header, the first fatbin container,
    # the section table at the end; 0 = anywhere
    magic = max(data.find(fatbin.CONTAINER_HEAD), 0)
    windows = {1: (0, 1024), 2: (magic, 1024), 3: (max(len(data) - 2048, 0), 2048)}
    for pos, val in edits:
        if not b:
            break
        if hot:
            start, span = windows[hot]
            i = (start + pos % span) % len(b)
        else:
            i = pos % len(b)
        b[i] = val
    if cut is not None and b:
        del b[cut % len(b) :]
    return bytes(b)


def _check(data: bytes, name: str) -> None:
    rec = FileRecord(path=name)
    describe(elf.Reader.from_buffer(data), rec, name=name, kernels=True)  # must not raise
    dumps(rec)
    fr = ForwardReader(io.BytesIO(data), len(data))
    res = fatbin.walk_region(fr, 0, len(data), section="fatbin", chain_only=True)  # type: ignore[arg-type]
    assert res.end <= max(len(data), 16) + 16


@pytest.mark.slow
@FUZZ
@given(
    name=st.sampled_from((*SEEDS, "synthetic")),
    edits=st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(0, 255)), max_size=12),
    cut=st.one_of(st.none(), st.integers(0, 1 << 30)),
    hot=st.integers(0, 3),
)
def test_mutated_fixtures(seeds, name, edits, cut, hot):
    _check(_mutate(seeds[name], edits, cut, hot), name)


@FUZZ
@given(
    data=st.binary(max_size=512),
    prefix=st.sampled_from([b"", b"\x7fELF\x02\x01\x01", b"\x50\xed\x55\xba\x01\x00\x10\x00"]),
)
def test_random_bytes(data, prefix):
    _check(prefix + data, "x.so")
