"""The fake vLLM trees are one shared base plus a per-version overlay (tests/oracle/conftest.py)."""

from __future__ import annotations

import pytest

from tests.oracle.conftest import BASE, FAKE, OVERLAID


def _files(root) -> set:
    return {p.relative_to(root) for p in root.rglob("*.py") if "__pycache__" not in p.parts}


@pytest.mark.parametrize("version", OVERLAID)
def test_an_overlay_holds_only_the_files_that_differ(version):
    overlay = FAKE / version
    files = _files(overlay)
    assert files
    same = sorted(
        str(r)
        for r in files
        if (BASE / r).is_file() and (BASE / r).read_bytes() == (overlay / r).read_bytes()
    )
    assert same == [], f"byte-identical to fake_vllm/base (delete them from fake_vllm/{version}): {same}"


def test_the_base_is_no_release_of_its_own():
    assert not (BASE / "vllm" / "__init__.py").exists()  # every overlay names its own version


@pytest.mark.parametrize("version", OVERLAID)
def test_an_assembled_tree_is_the_base_with_the_overlay_on_top(version, fake_vllm_tree):
    tree = fake_vllm_tree(version)
    overlay = FAKE / version
    assert _files(tree) == _files(BASE) | _files(overlay)
    for rel in _files(tree):
        src = overlay / rel if (overlay / rel).is_file() else BASE / rel
        assert (tree / rel).read_bytes() == src.read_bytes(), rel
    want = f"0.{int(version[1:])}.0"  # v026 -> 0.26.0
    assert (tree / "vllm" / "__init__.py").read_text() == f'__version__ = "{want}"\n'
