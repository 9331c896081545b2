"""The HTML page rendered by a real headless Chromium: screenshot + DOM assertions."""

from __future__ import annotations

import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from probe.matrix.fleet import merge
from probe.matrix.io import load_document
from probe.matrix.render_html import render_html

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install -y chromium)"),
]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


class _Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict[str, str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        a = {k: v or "" for k, v in attrs}
        if tag == "td" and "data-cell-id" in a:
            self.cells.append(a)


@pytest.fixture
def page(tmp_path, data_dir) -> Path:
    p = tmp_path / "matrix.html"
    p.write_text(render_html(load_document(data_dir / "baseline.json")), encoding="utf-8")
    return p


def test_screenshot_is_not_blank(tmp_path, page):
    shot = tmp_path / "shot.png"
    r = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,1000", page.as_uri())
    assert shot.is_file(), r.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1400, 1000)
    assert len(data) > 20_000, "screenshot is suspiciously small (blank page?)"


def test_dom_cells_classes_and_escaping(tmp_path, page, data_dir):
    r = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    parser = _Cells()
    parser.feed(dom)
    doc = load_document(data_dir / "baseline.json")
    ids = {c["data-cell-id"] for c in parser.cells}
    assert ids == {c.id for c in doc.cells}
    for c in parser.cells:
        cell = next(x for x in doc.cells if x.id == c["data-cell-id"])
        assert f"o-{cell.outcome.value}" in c["class"].split()
        if cell.root_cause:
            assert cell.root_cause in c["title"]  # the tooltip carries the root cause, as text
    # the hostile log string exists only as text: no script element, no img element was created
    assert "script" not in parser.tags and "img" not in parser.tags
    assert "&lt;script&gt;" in dom and "onerror=alert(1)&gt;" in dom


def test_fleet_page_renders(tmp_path, data_dir):
    fleet = merge(
        [load_document(data_dir / "baseline.json"), load_document(data_dir / "current-regression.json")]
    )
    p = tmp_path / "fleet.html"
    p.write_text(render_html(fleet), encoding="utf-8")
    r = _chromium(tmp_path, "--dump-dom", p.as_uri())
    parser = _Cells()
    parser.feed(r.stdout)
    regressed = [c for c in parser.cells if c["data-cell-id"] == "moe/cutlass/nvfp4/E=256/H=3072/I=1024/tp=1"]
    assert [c["data-outcome"] for c in regressed] == ["ok", "device_fault"]
