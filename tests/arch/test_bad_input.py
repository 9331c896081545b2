"""Bad input never stops the scan: the record carries an error, the summary counts it, exit 5."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from probe.arch import describe as describe_mod
from probe.arch.scanner import scan_file, scan_paths, summarize

REPO = Path(__file__).resolve().parents[2]


def _bad_tree(tmp: Path, cuda_fixtures) -> dict[str, str]:
    """name -> expected error fragment; plus one good file."""
    good = cuda_fixtures.path("multi.so").read_bytes()
    (tmp / "good.so").write_bytes(good)
    (tmp / "truncated.so").write_bytes(good[: len(good) // 3])
    cut_fatbin = cuda_fixtures.path("speed.fatbin").read_bytes()
    (tmp / "cut.fatbin").write_bytes(cut_fatbin[: len(cut_fatbin) - 100])
    corrupt = bytearray(good)
    i = corrupt.find(b"\x50\xed\x55\xba\x01\x00\x10\x00")
    corrupt[i + 16 : i + 24] = b"\xff" * 8  # first entry header destroyed
    (tmp / "corrupt_fatbin.so").write_bytes(bytes(corrupt))
    (tmp / "text.so").write_text("INPUT ( libfoo.so.1 )\n")  # a linker script: skipped, no error
    (tmp / "text.cubin").write_text("INPUT ( libfoo.so.1 )\n")  # a cubin that is not one
    (tmp / "elf32.so").write_bytes(b"\x7fELF\x01\x01\x01" + b"\0" * 100)
    (tmp / "empty.so").write_bytes(b"")
    (tmp / "cut.cubin").write_bytes(cuda_fixtures.path("sm_90a.cubin").read_bytes()[:200])
    (tmp / "dir.so").mkdir()
    os.mkfifo(tmp / "fifo.so")
    (tmp / "loop1.so").symlink_to(tmp / "loop2.so")
    (tmp / "loop2.so").symlink_to(tmp / "loop1.so")
    (tmp / "dangling.so").symlink_to(tmp / "nowhere.so")
    with zipfile.ZipFile(tmp / "notawheel-1.0-py3-none-any.whl", "w") as z:
        z.writestr("readme.txt", "hello")
    (tmp / "garbage-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 not really a zip")
    return {
        "truncated.so": "truncated",
        "cut.fatbin": "truncated",
        "corrupt_fatbin.so": "bad header size",
        "text.cubin": "not an ELF file",
        "elf32.so": "32-bit",
        "empty.so": "empty file",
        "cut.cubin": "",
        "fifo.so": "not a regular file",
        "loop1.so": "symlink loop",
        "loop2.so": "symlink loop",
        "dangling.so": "vanished or does not exist",
        "notawheel-1.0-py3-none-any.whl": "not a wheel",
        "garbage-1.0-py3-none-any.whl": "not a zip",
    }


def test_every_bad_file_gets_a_record(tmp_path, cuda_fixtures):
    expected = _bad_tree(tmp_path, cuda_fixtures)
    files = scan_paths([tmp_path], use_cache=False)
    by_name = {Path(f.path).name: f for f in files}
    assert by_name["good.so"].error is None and by_name["good.so"].entries
    for name, fragment in expected.items():
        assert name in by_name, name
        assert by_name[name].error, name
        assert fragment in by_name[name].error, (name, by_name[name].error)
    assert "dir.so" not in by_name  # a folder named *.so is walked into, not scanned
    assert by_name["text.so"].kind == "other" and by_name["text.so"].error is None
    s = summarize(files)
    assert s.errors == len(expected) and s.with_device_code >= 1


def test_explicit_directory_named_like_a_file_and_missing_path(tmp_path):
    (tmp_path / "x.cubin").mkdir()
    rec = scan_file(str(tmp_path / "x.cubin"))
    assert rec.error == "is a directory"
    files = scan_paths([tmp_path / "missing.so"], use_cache=False)
    assert files[0].error == "file vanished or does not exist"


def test_unreadable_and_vanishing_files(tmp_path, cuda_fixtures, monkeypatch):
    for n in ("a.so", "b.so", "c.so"):
        (tmp_path / n).write_bytes(cuda_fixtures.path("multi.so").read_bytes())
    real_open = describe_mod._open_file

    def fake_open(path: str, *args: bool) -> int:
        if path.endswith("a.so"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        if path.endswith("b.so"):
            os.unlink(path)  # vanishes between the walk and the read
        return real_open(path, *args)

    monkeypatch.setattr(describe_mod, "_open_file", fake_open)
    files = {Path(f.path).name: f for f in scan_paths([tmp_path], use_cache=False, jobs=1)}
    assert files["a.so"].error == "permission denied"
    assert files["b.so"].error == "file vanished or does not exist"
    assert files["c.so"].error is None and files["c.so"].entries


def test_symlinked_directory_cycle_is_walked_once(tmp_path, cuda_fixtures):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "k.cubin").write_bytes(cuda_fixtures.path("sm_120.cubin").read_bytes())
    (tmp_path / "pkg" / "again").symlink_to(tmp_path)
    (tmp_path / "same.cubin").symlink_to(tmp_path / "pkg" / "k.cubin")
    files = scan_paths([tmp_path], use_cache=False)
    assert len(files) == 1 and files[0].error is None


def test_cli_partial_exit_code_and_json(tmp_path, cuda_fixtures):
    _bad_tree(tmp_path, cuda_fixtures)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-m", "probe", "scan", str(tmp_path), "--json", "--no-cache", "--target", "sm_90"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    assert out.returncode == 5, out.stderr
    assert "Traceback" not in out.stderr
    data = json.loads(out.stdout)
    assert data["summary"]["errors"] == sum(1 for f in data["files"] if f["error"])
    assert data["summary"]["errors"] >= 10
    text = subprocess.run(
        [sys.executable, "-m", "probe", "scan", str(tmp_path), "--no-cache", "--target", "sm_90"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    assert text.returncode == 5 and "Traceback" not in text.stderr
    assert "with errors" in text.stdout and "symlink loop" in text.stdout
