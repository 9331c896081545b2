"""How far a ninja build has got: its build steps (translation units and the link) and how many are done.

FlashInfer's JIT (``flashinfer.jit``: one ``build.ninja`` per module, under the JIT cache, objects beside
it), torch C++ extensions (``torch.utils.cpp_extension``) and DeepGEMM's builds run ninja. Two ways to
count, both used by :class:`probe.sandbox.jit.CompileWatch`:

* the build file (:class:`BuildFiles`): every ``build`` edge of the ``build.ninja`` that ninja was given
  (``-f``, following ``subninja`` / ``include``) or that lies beside a compiler's ``-o`` output; an edge
  whose outputs all exist is done. This counts objects built by an earlier, interrupted build too (ninja
  does not rebuild them), so "M of K" is the module's own progress.
* ninja's status lines (:func:`status_line`): ``[N/M] command`` printed as each step finishes (FlashInfer
  prints them with ``FLASHINFER_JIT_VERBOSE=1``); N and M count only this invocation's steps.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_STATUS = re.compile(r"^\[(\d+)/(\d+)\]\s")
_MAX_FILES = 64  # subninja / include files followed per build


@dataclass(frozen=True)
class Units:
    """``done`` of ``total`` build steps; ``source``: ``build.ninja`` (counted on disk) or ``ninja status``
    (printed by ninja)."""

    done: int
    total: int
    source: str


def status_line(line: str) -> tuple[int, int] | None:
    """(finished, total) of a ninja status line ``[N/M] ...``, else None."""
    m = _STATUS.match(line)
    if not m:
        return None
    done, total = int(m.group(1)), int(m.group(2))
    return (done, total) if total > 0 and done <= total else None


def _logical_lines(text: str) -> Iterable[str]:
    """Lines with ninja's ``$`` + newline continuations joined."""
    buf = ""
    for raw in text.splitlines():
        if raw.endswith("$") and not raw.endswith("$$"):
            buf += raw[:-1]
            continue
        yield buf + raw
        buf = ""
    if buf:
        yield buf


def _split_paths(text: str) -> list[str]:
    """Space-separated ninja paths (``$ `` is an escaped space, ``$:`` an escaped colon)."""
    marked = text.replace("$$", "\0").replace("$ ", "\1").replace("$:", "\2")
    return [p.replace("\0", "$").replace("\1", " ").replace("\2", ":") for p in marked.split()]


def edge_outputs(text: str, base: Path) -> tuple[list[list[str]], list[str]]:
    """(outputs of each non-phony ``build`` edge, files named by ``subninja`` / ``include``) of a ninja file;
    relative paths against ``base`` (ninja's working folder)."""
    edges: list[list[str]] = []
    nested: list[str] = []
    for line in _logical_lines(text):
        if line.startswith(("subninja ", "include ")):
            nested.append(str(base / line.split(None, 1)[1].strip()))
            continue
        if not line.startswith("build "):
            continue
        outs, sep, rest = line[len("build ") :].partition(":")
        if not sep or rest.split()[:1] == ["phony"]:
            continue
        paths = [str(base / p) for p in _split_paths(outs.split("|", 1)[0])]
        if paths:
            edges.append(paths)
    return edges, nested


class BuildFiles:
    """The edges of ninja build files, read once per file version (path, size, mtime)."""

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[tuple[int, int], list[list[str]], list[str]]] = {}

    def _edges(self, path: str, base: Path) -> tuple[list[list[str]], list[str]]:
        try:
            st = Path(path).stat()
        except OSError:
            return [], []
        key = (st.st_size, st.st_mtime_ns)
        hit = self._parsed.get(path)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return [], []
        edges, nested = edge_outputs(text, base)
        self._parsed[path] = (key, edges, nested)
        return edges, nested

    def units(self, files: Iterable[str], base: dict[str, Path] | None = None) -> Units | None:
        """Build steps of ``files`` (and the files they include) and how many have all their outputs on
        disk; ``base``: ninja's working folder per file (default: the file's folder). None: no edges."""
        todo = list(dict.fromkeys(files))
        seen: set[str] = set()
        outputs: dict[str, list[str]] = {}
        while todo and len(seen) < _MAX_FILES:
            path = todo.pop(0)
            if path in seen:
                continue
            seen.add(path)
            folder = (base or {}).get(path) or Path(path).parent
            edges, nested = self._edges(path, folder)
            for outs in edges:
                outputs.setdefault(outs[0], outs)
            todo += [n for n in nested if n not in seen]
        if not outputs:
            return None
        done = sum(1 for outs in outputs.values() if all(Path(p).exists() for p in outs))
        return Units(done, len(outputs), "build.ninja")


def ninja_files(argv: list[str]) -> tuple[str, Path] | None:
    """(build file, working folder) of a ninja command line (``-C DIR``, ``-f FILE``; default
    ``build.ninja`` in the working folder)."""
    cwd: Path | None = None
    file = "build.ninja"
    args = argv[1:]
    for i, a in enumerate(args[:-1]):
        if a == "-C":
            cwd = Path(args[i + 1])
        elif a == "-f":
            file = args[i + 1]
    if cwd is None:
        return None if file == "build.ninja" else (file, Path(file).parent)
    path = Path(file) if Path(file).is_absolute() else cwd / file
    return str(path), cwd


def output_build_file(argv: list[str]) -> str | None:
    """The ``build.ninja`` beside a compiler's ``-o`` output (FlashInfer, torch extensions keep their
    objects beside their build file), if there is one."""
    for i, a in enumerate(argv[:-1]):
        if a == "-o":
            candidate = Path(argv[i + 1]).parent / "build.ninja"
            return str(candidate) if candidate.is_file() else None
    return None
