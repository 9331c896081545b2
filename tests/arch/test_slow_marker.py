"""The everyday run (``-m "not slow"``) scans the prebuilt CUDA fixtures instead of waiting for nvcc."""

from __future__ import annotations

import pytest

from tests.arch.conftest import slow_deselected


class _Config:
    def __init__(self, markexpr: str) -> None:
        self.markexpr = markexpr

    def getoption(self, name: str, default: str = "") -> str:
        assert name == "markexpr"
        return self.markexpr


@pytest.mark.parametrize(
    ("markexpr", "deselected"),
    [
        ("", False),
        ("not slow", True),
        ("not slow and not network", True),
        ("not network", False),
        ("gpu", False),
        ("slow", False),
    ],
)
def test_slow_deselected_reads_the_mark_expression(markexpr, deselected):
    assert slow_deselected(_Config(markexpr)) is deselected  # type: ignore[arg-type]
