"""The tree is ruff-clean with the repository's configuration (pyproject.toml [tool.ruff])."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_clean():
    ruff = shutil.which("ruff")
    cmd = [ruff] if ruff else [sys.executable, "-m", "ruff"]
    try:
        r = subprocess.run(
            [*cmd, "check", "probe", "tests", "benchmarks", "scripts"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except FileNotFoundError:
        pytest.skip("ruff is not installed (it is in the [test] extra)")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_modules_and_functions_stay_readable():
    """A reader sees a function whole: no function of the package over 80 lines, no module over 450."""
    import ast

    too_long = []
    for path in sorted((ROOT / "probe").rglob("*.py")):
        if "data" in path.relative_to(ROOT / "probe").parts:
            continue
        src = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        if len(src.splitlines()) > 450:
            too_long.append(f"{rel}: {len(src.splitlines())} lines")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    too_long.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert too_long == []
