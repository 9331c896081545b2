"""The one version module: how every part of probe reads a version, and which layout a release gets."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from probe import versions as v

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0.26.0", (0, 26, 0)),
        ("v0.26", (0, 26, 0)),
        ("0.33.0rc1+cu130", (0, 33, 0)),
        ("0.11.0.dev12", (0, 11, 0)),  # a pre-release suffix stops the numeric part
        ("0.10.1.1", (0, 10, 1, 1)),
        ("2.14.0+cu130", (2, 14, 0)),
        ("", None),
        (None, None),
        ("nightly", None),
    ],
)
def test_parse_version(text, want):
    assert v.parse_version(text) == want


def test_release_line_and_at_least():
    assert v.release_line("0.33.1.dev3+g1234") == "0.33"
    assert v.release_line("garbage") is None
    assert v.at_least("0.26.0", "0.18.1") and not v.at_least("0.18.0", "0.18.1")
    assert not v.at_least(None, "0.1") and not v.at_least("0.26", None)


def test_probe_layouts_by_release():
    assert v.layout_for("0.16.0").moe_backend_module is None
    assert v.layout_for("0.18.1").compiled_modules == ("vllm._C", "vllm._moe_C")
    assert v.layout_for("0.26.0").compiled_modules == (
        "vllm._C_stable_libtorch",
        "vllm._moe_C_stable_libtorch",
    )
    assert v.layout_for("0.26.0").moe_factory_names == ("FusedMoE",)
    assert v.layout_for("0.33.0").moe_factory_names[0] == "FusedMoEFactory"
    assert v.layout_for("not a version") is v.LAYOUTS[0]


def test_oracle_layouts_by_release_line():
    """From 0.26 on every release is asked through the one layout (the child detects what a release
    lacks); older ones are skipped with the reason."""
    for version in ("0.26.0", "0.26.1.dev3", "0.30.0", "0.33.0+cu130", "0.40.0"):
        assert v.oracle_layout(version) is not None and v.oracle_skip_reason(version) is None
    assert v.oracle_layout("0.30.0")["name"] == "vllm-0.30"
    assert v.oracle_layout("0.25.1") is None and v.oracle_layout("garbage") is None
    assert "from vLLM 0.26.0 on" in (v.oracle_skip_reason("0.20.0") or "")


def test_the_version_module_imports_only_the_standard_library():
    """The oracle child imports it inside the image's own Python, where probe's dependencies may be
    missing: nothing outside the standard library, and nothing else of probe."""
    tree = ast.parse((ROOT / "probe" / "versions.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "re", "dataclasses", "typing"}, names


def test_no_other_version_parser_in_the_package():
    """One path per concept: no module but probe/versions.py defines a version parser."""
    found = []
    for path in (ROOT / "probe").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in (
                "parse_version",
                "version_tuple",
                "release_line",
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert found == ["probe/versions.py:parse_version", "probe/versions.py:release_line"]
