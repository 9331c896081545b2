"""The package's import graph, read from the source (AST): no import circles, and the layers hold.

- no circles between modules of ``probe`` (imports inside functions count, and so do ``if
  TYPE_CHECKING:`` imports: a circle a type checker has to follow is still a circle a reader has to);
- ``probe.arch`` (static analysis) never imports the dynamic half or what is built on it
  (``sandbox``, ``probes``, ``matrix``, ``recommend``);
- ``probe.sandbox`` / ``probe.probes`` never import ``probe.arch`` (the ELF reader is not theirs);
- only ``probe/arch/elf.py`` imports pyelftools;
- the CLI verbs that must start fast and work without a GPU stack (scan, recommend, gate,
  classify) reach no torch / vLLM / FlashInfer / Triton through any import that can run, and
  running ``probe scan`` / ``probe classify`` loads none of them.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "probe"
HEAVY = ("torch", "vllm", "flashinfer", "triton")
FAST_VERBS = ("scan", "recommend", "gate", "classify")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, module: str, is_pkg: bool) -> Iterator[tuple[str, bool]]:
    """(imported name, type-checking only) for every import in ``tree``, inside functions too."""

    def walk(node: ast.AST, typing_only: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.body:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), True)
                for sub in child.orelse:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), typing_only)
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    yield a.name, typing_only
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    pkg_parts = module.split(".") if is_pkg else module.split(".")[:-1]
                    pkg_parts = pkg_parts[: len(pkg_parts) - child.level + 1]
                    base = ".".join([*pkg_parts, *([base] if base else [])])
                yield base, typing_only
                for a in child.names:  # ``from probe.arch import elf`` imports a module
                    yield f"{base}.{a.name}", typing_only
            else:
                yield from walk(child, typing_only)

    yield from walk(tree, False)


@cache
def graph() -> dict[str, list[tuple[str, bool]]]:
    """module -> its imports (names as written, resolved to ``probe`` modules where they are one)."""
    files = {_module_name(p): p for p in PKG.rglob("*.py") if "data" not in p.relative_to(PKG).parts}
    out: dict[str, list[tuple[str, bool]]] = {}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges = []
        for name, typing_only in _imports(tree, mod, path.name == "__init__.py"):
            if (name.startswith("probe.") or name == "probe") and name not in files:
                continue  # ``from probe.x import some_function``
            edges.append((name, typing_only))
        out[mod] = edges
    return out


def _probe_edges(*, runtime_only: bool = True) -> dict[str, set[str]]:
    g = graph()
    return {
        m: {n for n, typing_only in edges if n in g and n != m and not (runtime_only and typing_only)}
        for m, edges in g.items()
    }


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_graph_reader_sees_imports():
    """The reader itself: known edges are found (a reader that finds nothing would pass the rest)."""
    g = _probe_edges()
    assert "probe.arch.elf" in g["probe.arch.describe"]
    assert "probe.arch.records" in g["probe.arch.scanner"]
    assert "probe.arch.wheel" in g["probe.arch.scanner"]  # a lazy import inside a function counts
    assert "probe.catalog.gpus" not in g["probe.arch.scanner"]  # under TYPE_CHECKING only
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    reached = _closure("probe.cli.scan")
    assert "probe.arch.elf" in reached and any(_in(n, "elftools") for n in reached)


#: circles that another part of the work is still breaking: {frozenset(modules): reason}
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _cycle_params() -> list[object]:
    params: list[object] = []
    for c in _cycles(_probe_edges(runtime_only=False)):
        reason = KNOWN_CYCLES.get(frozenset(c))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(c, id="+".join(m.removeprefix("probe.") for m in c), marks=marks))
    return params or [pytest.param(None, id="none")]


@pytest.mark.parametrize("cycle", _cycle_params())
def test_no_import_cycles(cycle):
    assert cycle is None, f"import circle: {' <-> '.join(cycle)}"


def test_known_cycles_still_exist():
    """An entry of KNOWN_CYCLES whose circle is gone must be removed (the xfail would hide nothing)."""
    found = {frozenset(c) for c in _cycles(_probe_edges(runtime_only=False))}
    assert set(KNOWN_CYCLES) <= found


def _violations(source_pkg: str, forbidden: tuple[str, ...]) -> list[str]:
    g = graph()
    return sorted(
        f"{m} imports {n}"
        for m, edges in g.items()
        if _in(m, source_pkg)
        for n, _typing in edges
        if any(_in(n, f) for f in forbidden)
    )


#: The package's layers, lowest first. A module may import its own layer and the layers below it, never
#: one above (imports inside functions count: a lazy import is still an arrow). Packages sharing a layer
#: do not import each other, except the pairs in SIDEWAYS.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "probe",
        "probe.outcomes",
        "probe.errors",
        "probe.versions",
        "probe.cell_params",
        "probe.cells",
        "probe.safejson",
        "probe.cachedir",
        "probe.userfile",
        "probe.textsafe",
        "probe.outfile",
    ),
    ("probe.catalog",),
    ("probe.modelcfg", "probe.reports"),
    ("probe.arch", "probe.sandbox", "probe.probes"),
    ("probe.matrix",),
    ("probe.oracle", "probe.recommend", "probe.run"),
    ("probe.decide",),
    ("probe.cli", "probe.__main__"),
)
#: (importer, imported) packages of one layer that may import sideways; the core modules (first layer) and
#: the entry points (last layer) are one package each
SIDEWAYS = {("probe.probes", "probe.sandbox"), ("probe.probes", "probe.arch")}
ONE_PACKAGE_LAYERS = (0, len(LAYERS) - 1)


def _layer_of(module: str) -> tuple[int, str]:
    best: tuple[int, str] | None = None
    for rank, members in enumerate(LAYERS):
        for pkg in members:
            if (module == pkg or (pkg != "probe" and _in(module, pkg))) and (
                best is None or len(pkg) > len(best[1])
            ):
                best = (rank, pkg)
    assert best is not None, f"{module} belongs to no layer of LAYERS: add it"
    return best


def _upward_arrows() -> list[str]:
    edges = _probe_edges()
    bad = []
    for mod, targets in edges.items():
        rank, pkg = _layer_of(mod)
        for target in targets:
            t_rank, t_pkg = _layer_of(target)
            sideways = t_rank == rank and t_pkg != pkg and rank not in ONE_PACKAGE_LAYERS
            if t_rank > rank or (sideways and (pkg, t_pkg) not in SIDEWAYS):
                bad.append(f"{mod} ({pkg}) imports {target} ({t_pkg})")
    return sorted(bad)


def test_no_import_runs_up_the_layers():
    assert _upward_arrows() == []


def test_the_layer_check_sees_lazy_imports():
    """The layer reader counts an import inside a function (``probe.cli.diff`` imports
    ``probe.decide.compare`` inside ``execute``), and ranks a deciding verb above the matrix."""
    assert "probe.decide.compare" in _probe_edges()["probe.cli.diff"]
    assert (
        _layer_of("probe.decide.regressions")[0]
        > _layer_of("probe.matrix.schema")[0]
        > _layer_of("probe.cells")[0]
    )
    assert _layer_of("probe.recommend.sources")[0] > _layer_of("probe.matrix.io")[0]


def test_arch_does_not_import_the_dynamic_half():
    assert (
        _violations("probe.arch", ("probe.sandbox", "probe.probes", "probe.matrix", "probe.recommend")) == []
    )


# The one bridge from the dynamic half to the static one: a probe asks the ELF scan, in the child, whether
# the module it is about to launch has SASS for this GPU (else the driver JIT-compiles PTX in-process).
ARCH_BRIDGE = "probe.probes.ptxjit"


@pytest.mark.parametrize("pkg", ["probe.sandbox", "probe.probes"])
def test_sandbox_and_probes_do_not_import_arch(pkg):
    found = [v for v in _violations(pkg, ("probe.arch",)) if not v.startswith(f"{ARCH_BRIDGE} imports ")]
    assert found == []
    bridge = _violations(ARCH_BRIDGE, ("probe.arch",))
    allowed = {"probe.arch.describe", "probe.arch.verdicts"}
    assert all(v.split(" imports ")[1] in allowed for v in bridge), bridge


def test_only_arch_elf_imports_pyelftools():
    users = sorted({m for m, edges in graph().items() for n, _t in edges if _in(n, "elftools")})
    assert users == ["probe.arch.elf"]


def _closure(start: str) -> set[str]:
    """Every name ``start`` may import when it runs (module level or inside functions), directly or
    through probe modules."""
    g = graph()
    seen: set[str] = set()
    todo = [start]
    names: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for n, typing_only in g.get(m, []):
            if typing_only:
                continue
            names.add(n)
            if n in g:
                todo.append(n)
    return names


@pytest.mark.parametrize("verb", FAST_VERBS)
def test_fast_verbs_import_no_gpu_stack(verb):
    reached = _closure(f"probe.cli.{verb}")
    assert f"probe.cli.{verb}" in graph() and reached  # the verb exists and imports something
    assert sorted(n for n in reached if n.split(".")[0] in HEAVY) == []


_RUN = """
import json, sys
from probe.cli.main import main
rc = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in %r)
print(json.dumps({"rc": rc, "heavy": heavy}), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["scan", "--no-cache", "--all-targets", "--backends", "tests/fixtures/cuda/prebuilt"],
        ["classify", "--json", "tests/data/logs"],
    ],
    ids=["scan", "classify"],
)
def test_running_fast_verbs_loads_no_gpu_stack(argv, tmp_path):
    if argv[0] == "classify":
        logs = sorted((ROOT / "tests/data/logs").rglob("*.log"))
        if not logs:
            pytest.skip("no sample logs")
        argv = [*argv[:-1], str(logs[0])]
    r = subprocess.run(
        [sys.executable, "-c", _RUN % (HEAVY,), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PROBE_CACHE_DIR": str(tmp_path)},
    )
    last = r.stderr.strip().splitlines()[-1]
    result = json.loads(last)
    assert result["rc"] in (0, 5), r.stderr[-2000:]
    assert result["heavy"] == []
