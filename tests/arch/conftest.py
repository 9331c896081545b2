"""Session fixtures for the scan tests: CUDA binaries compiled by nvcc once per session.

When nvcc is missing the tests run on the committed prebuilt copies
(tests/fixtures/cuda/prebuilt/, rebuilt by tests/fixtures/cuda/build_fixtures.py --prebuilt)
and the run says so loudly in its summary.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

FIXTURE_SRC = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
sys.path.insert(0, str(FIXTURE_SRC))

import build_fixtures  # noqa: E402

_NOTES: list[str] = []


@dataclass(frozen=True)
class CudaFixtures:
    dir: Path
    manifest: dict
    compiled: bool  # True: built by nvcc in this session; False: prebuilt copies
    nvcc: str | None

    def path(self, name: str) -> Path:
        return self.dir / name

    @property
    def names(self) -> list[str]:
        return sorted(self.manifest["fixtures"])


def slow_deselected(config: pytest.Config) -> bool:
    """True when ``-m`` leaves out the tests marked ``slow`` (e.g. ``-m "not slow"``, the everyday run)."""
    expr = config.getoption("markexpr", "")
    if not expr:
        return False
    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expr)
    return compiled.evaluate(lambda name, **_: False) and not compiled.evaluate(
        lambda name, **_: name == "slow"
    )


def _prebuilt(tmp_path_factory: pytest.TempPathFactory) -> CudaFixtures:
    out = tmp_path_factory.mktemp("cuda_prebuilt")
    for p in build_fixtures.PREBUILT.iterdir():
        shutil.copy2(p, out / p.name)
    return CudaFixtures(out, json.loads((out / "manifest.json").read_text()), False, None)


@pytest.fixture(scope="session")
def cuda_fixtures(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> CudaFixtures:
    """nvcc builds the fixtures (about 25 s on 2 cores) unless the ``slow`` tests are deselected: the
    everyday ``-m "not slow"`` run, like CI without nvcc, scans the committed prebuilt copies."""
    nvcc = shutil.which("nvcc")
    if nvcc and slow_deselected(request.config):
        return _prebuilt(tmp_path_factory)
    release = build_fixtures.nvcc_release(nvcc) if nvcc else None
    if release is not None:
        out = tmp_path_factory.mktemp("cuda_fixtures")
        try:
            manifest_path = build_fixtures.build_all(out, nvcc)
            return CudaFixtures(out, json.loads(manifest_path.read_text()), True, release)
        except RuntimeError as exc:
            note = f"nvcc {release} could not build the CUDA fixtures ({exc}); using the prebuilt copies"
    else:
        note = (
            "nvcc NOT FOUND: the scan tests run on the committed prebuilt CUDA fixtures only "
            "(tests/fixtures/cuda/prebuilt/); install the CUDA toolkit to test freshly compiled code"
        )
    _NOTES.append(note)
    warnings.warn(note, stacklevel=1)
    return _prebuilt(tmp_path_factory)


@pytest.fixture(scope="session")
def cuobjdump() -> str | None:
    from probe.arch.cuobjdump import find_cuobjdump

    return find_cuobjdump()


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the user's scan cache from tests."""
    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path / "probe-cache"))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    for note in _NOTES:
        terminalreporter.write_sep("!", "WARNING")
        terminalreporter.write_line(note, red=True, bold=True)
