"""The child-side check of the attention probe: does a compiled module run from PTX on this GPU?
(``probe.probes.ptxjit``, on the nvcc-built fixtures: none.so has sm_75 + sm_87 SASS and compute_89 PTX)."""

from __future__ import annotations

import shutil
import sys

import pytest

from probe.probes import ptxjit


@pytest.fixture
def fixture_module(cuda_fixtures, tmp_path, monkeypatch):
    pkg = tmp_path / "ptxjit_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copy2(cuda_fixtures.path("none.so"), pkg / "_fa_fixture.abi3.so")
    monkeypatch.syspath_prepend(str(tmp_path))
    ptxjit.module_verdict.cache_clear()
    yield "ptxjit_pkg._fa_fixture"
    sys.modules.pop("ptxjit_pkg", None)
    ptxjit.module_verdict.cache_clear()


def test_module_without_sass_for_the_gpu_is_ptx_jit(fixture_module):
    v = ptxjit.module_verdict(fixture_module, 90)
    assert v is not None and v["verdict"] == "ptx-jit" and v["via"] == "compute_89"
    assert v["file"].endswith("_fa_fixture.abi3.so")
    assert ptxjit.module_verdict(fixture_module, 75)["verdict"] == "sass"
    assert (
        ptxjit.module_verdict(fixture_module, 80)["verdict"] == "none"
    )  # compute_89 PTX cannot run on sm_80


def test_fa_reason_names_the_module_and_the_ptx(fixture_module, monkeypatch):
    monkeypatch.setitem(ptxjit.FA_MODULES, 2, fixture_module)
    why = ptxjit.fa_ptx_jit(2, 90)
    assert why is not None and "_fa_fixture has no SASS for sm_90" in why and "compute_89 PTX" in why
    assert ptxjit.fa_ptx_jit(2, 75) is None  # SASS: nothing to JIT
    assert ptxjit.fa_ptx_jit(None, 90) is None


def test_missing_module_is_no_answer():
    assert ptxjit.module_verdict("no_such_pkg_xyz._mod", 90) is None
