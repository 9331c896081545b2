"""The crash-log corpus (``tests/data/logs/``): its collections and their index files (format:
``tests/data/logs/README.md``)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "logs"


def find_collections(root: Path = CORPUS) -> list[Path]:
    """``root`` itself when it holds an index.json, else every sub-folder of it that does (sorted)."""
    if (root / "index.json").is_file():
        return [root]
    return sorted(p for p in root.iterdir() if (p / "index.json").is_file())


def read_index(folder: Path) -> list[dict]:
    return json.loads((folder / "index.json").read_text())
