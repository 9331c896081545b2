"""Wheels read from the zip (stored, deflated, streamed), the result cache, and the CLI verb."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from probe.arch import elfstream, wheel
from probe.arch import scanner as scan_mod
from probe.arch.scan_cache import CACHE_FILE, ScanCache
from probe.arch.scanner import cache_roots, default_roots, scan_file, scan_paths

REPO = Path(__file__).resolve().parents[2]
MEMBERS = ("multi.so", "rdc.so", "sm_100f.cubin", "speed.fatbin", "k110a.ptx")


def _make_wheel(
    tmp: Path, cuda_fixtures, compression: int, name: str = "fxpkg-1.0-cp311-cp311-linux_x86_64.whl"
) -> Path:
    path = tmp / name
    with zipfile.ZipFile(path, "w", compression) as z:
        for m in MEMBERS:
            z.write(cuda_fixtures.path(m), f"fxpkg/{m}")
        z.writestr("fxpkg/__init__.py", "")
        z.writestr("fxpkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return path


def _strip(rec):
    d = rec.to_dict()
    for k in ("path", "package", "cached"):
        del d[k]
    d.pop("package_version", None)  # a wheel member's comes from the wheel's file name
    for e in d["entries"]:
        e.pop("offset")
    return d


@pytest.mark.parametrize("mode", ["stored", "deflated", "streamed"])
def test_wheel_members_match_files_on_disk(tmp_path, cuda_fixtures, monkeypatch, mode):
    if mode == "streamed":  # force the one-pass streaming reader, with small chunks
        monkeypatch.setattr(wheel, "SMALL_MEMBER", 1000)
        monkeypatch.setattr(elfstream, "CHUNK", 4096)
    comp = zipfile.ZIP_STORED if mode == "stored" else zipfile.ZIP_DEFLATED
    whl = _make_wheel(tmp_path, cuda_fixtures, comp)
    recs = scan_paths([whl], kernels=True, use_cache=False)
    assert [r.path for r in recs] == [f"{whl}!fxpkg/{m}" for m in MEMBERS]
    for r, m in zip(recs, MEMBERS, strict=True):
        assert r.package == "fxpkg" and r.error is None
        assert _strip(r) == _strip(scan_file(str(cuda_fixtures.path(m)), kernels=True)), m


def test_streaming_reader_keeps_windows(tmp_path):
    import io

    data = bytes(range(256)) * 1000
    fr = elfstream.ForwardReader(io.BytesIO(data), len(data))
    fr.capture(200_000, 200_100)
    assert fr.read(10, 4) == data[10:14]
    assert fr.find(bytes([8, 9, 10, 11]), 100) == 264
    fr.finish()
    assert fr.window(200_010, 200_020) == data[200_010:200_020]
    with pytest.raises(elfstream.BackwardRead):
        fr.read(5, 1)


def test_bad_members_and_truncated_wheel(tmp_path, cuda_fixtures):
    whl = tmp_path / "bad-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("bad/empty.so", b"")
        z.writestr("bad/text.so", b"not an elf at all")
        z.writestr("bad/cut.so", cuda_fixtures.path("multi.so").read_bytes()[:5000])
        z.writestr("bad-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    errs = {r.path.rsplit("!", 1)[1]: r.error for r in scan_paths([whl], use_cache=False)}
    assert errs["bad/empty.so"] == "empty file"
    assert errs["bad/text.so"] is None  # not ELF, named like a library (an ld script): skipped
    assert "truncated" in errs["bad/cut.so"]
    good = _make_wheel(tmp_path, cuda_fixtures, zipfile.ZIP_DEFLATED, "cut-1.0-py3-none-any.whl")
    raw = good.read_bytes()
    good.write_bytes(raw[: len(raw) // 2])
    recs = scan_paths([good], use_cache=False)
    assert len(recs) == 1 and recs[0].error and "zip" in recs[0].error


def test_cache_hits_misses_and_corruption(tmp_path, cuda_fixtures, monkeypatch):
    cache_dir = tmp_path / "c"
    monkeypatch.setenv("PROBE_CACHE_DIR", str(cache_dir))
    d = tmp_path / "tree"
    d.mkdir()
    for m in ("multi.so", "sm_90a.cubin"):
        (d / m).write_bytes(cuda_fixtures.path(m).read_bytes())
    whl = _make_wheel(d, cuda_fixtures, zipfile.ZIP_DEFLATED)
    # small files are not worth a cache lookup (except with --kernels) ...
    scan_paths([d / "sm_90a.cubin"])
    assert not scan_paths([d / "sm_90a.cubin"])[0].cached
    # ... the fixtures are all small: cache everything for the rest of this test
    monkeypatch.setattr(scan_mod, "CACHE_MIN_SIZE", 0)
    first = scan_paths([d])
    assert not any(r.cached for r in first)
    second = scan_paths([d])
    assert all(r.cached for r in second)
    assert [_strip(a) for a in first] == [_strip(b) for b in second]
    # a changed file is re-read; --kernels results are cached separately
    (d / "sm_90a.cubin").write_bytes(cuda_fixtures.path("sm_120.cubin").read_bytes())
    third = {Path(r.path).name: r for r in scan_paths([d])}
    assert not third["sm_90a.cubin"].cached and third["sm_90a.cubin"].entries[0].arch == "sm_120"
    assert third["multi.so"].cached
    assert not any(r.cached for r in scan_paths([d], kernels=True))
    assert not any(r.cached for r in scan_paths([d], use_cache=False))
    # a corrupt cache file is moved aside, the scan goes on
    (cache_dir / CACHE_FILE).write_bytes(b"this is not sqlite" * 100)
    fourth = scan_paths([d])
    assert len(fourth) == len(first) and not any(r.error for r in fourth)
    assert (cache_dir / (CACHE_FILE + ".corrupt")).exists()
    assert whl.exists()
    c = ScanCache(cache_dir / CACHE_FILE)
    assert c.enabled
    c.close()
    conn = sqlite3.connect(cache_dir / CACHE_FILE)
    assert conn.execute("select count(*) from records").fetchone()[0] >= 3


def test_error_records_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path / "c"))
    (tmp_path / "x.so").write_bytes(b"junk")
    scan_paths([tmp_path / "x.so"])
    assert not scan_paths([tmp_path / "x.so"])[0].cached


def test_default_roots_and_caches(tmp_path, monkeypatch):
    roots = default_roots()
    assert roots and all(os.path.isdir(r) for r in roots)
    assert default_roots(sys.executable) == roots
    for var, sub in (("TRITON_CACHE_DIR", "triton"), ("TORCH_EXTENSIONS_DIR", "ext")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "fi"))
    (tmp_path / "fi" / ".cache" / "flashinfer").mkdir(parents=True)
    site = tmp_path / "site"
    (site / "flashinfer_cubin" / "cubins").mkdir(parents=True)
    got = dict((label, d) for d, label in cache_roots([str(site)]))
    assert got == {
        "triton-cache": str(tmp_path / "triton"),
        "torch-extensions": str(tmp_path / "ext"),
        "flashinfer-jit-cache-dir": str(tmp_path / "fi" / ".cache" / "flashinfer"),
        "flashinfer-cubin": str(site / "flashinfer_cubin" / "cubins"),
    }


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "probe", "scan", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=e,
        cwd=REPO,
    )


def test_cli_json_contract(tmp_path, cuda_fixtures):
    out = _cli(
        str(cuda_fixtures.dir), "--json", "--kernels", "--target", "sm_110a", "--target", "12.0", "--no-cache"
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["schema_version"] == 1 and data["probe_version"]
    assert [t["target"] for t in data["targets"]] == ["sm_110", "sm_120"]
    assert {t["source"] for t in data["targets"]} == {"argument"}
    assert set(data["summary"]) >= {"files", "with_device_code", "errors"}
    multi = next(f for f in data["files"] if f["path"].endswith("multi.so"))
    assert multi["kind"] == "elf" and multi["error"] is None and multi["containers"] >= 2
    e = next(e for e in multi["entries"] if e["arch"] == "sm_100f")
    for key in (
        "section",
        "container",
        "kind",
        "arch",
        "sm",
        "suffix",
        "ptx_isa",
        "compression",
        "loadable",
        "size",
        "uncompressed_size",
        "kernels",
    ):
        assert key in e
    assert (e["section"], e["kind"], e["sm"], e["suffix"], e["loadable"]) == (
        ".nv_fatbin",
        "sass",
        100,
        "f",
        True,
    )
    v = {
        (x["path"].rsplit("/", 1)[1], t, x["kernel"]): tv["verdict"]
        for x in data["verdicts"]
        for t, tv in x["targets"].items()
    }
    assert v[("multi.so", "sm_110", None)] == "sass"
    assert v[("multi.so", "sm_120", None)] == "sass"
    assert v[("multi.so", "sm_110", "void marlin_moe_like<4>(int const*, float*)")] == "ptx-jit"
    assert v[("sm_90a.cubin", "sm_110", None)] == "none"
    assert v[("ptxonly.so", "sm_120", None)] == "ptx-jit"


def test_cli_formats_output_file_and_usage_errors(tmp_path, cuda_fixtures):
    md = tmp_path / "out.md"
    out = _cli(str(cuda_fixtures.path("multi.so")), "--format", "md", "--all-targets", "--output", str(md))
    assert out.returncode == 0 and out.stdout == ""
    text = md.read_text()
    assert "/multi.so " in text and "sm_121" in text and "sass-compatible" in text
    bad = _cli("--target", "sm_999x")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    bad = _cli("--python", str(tmp_path / "no-python"))
    assert bad.returncode == 2 and "no such interpreter" in bad.stderr
    both = _cli("--target", "sm_90", "--all-targets", str(tmp_path))
    assert both.returncode == 2


@pytest.mark.slow
def test_cli_python_and_caches(tmp_path, cuda_fixtures):
    tri = tmp_path / "triton" / "abc"
    tri.mkdir(parents=True)
    (tri / "kernel.cubin").write_bytes(cuda_fixtures.path("sm_90a.cubin").read_bytes())
    env = {
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
        "HOME": str(tmp_path),
        "PROBE_CACHE_DIR": str(tmp_path / "pc"),
    }
    out = _cli("--python", sys.executable, "--caches", "--json", "--target", "sm_90", env=env)
    assert out.returncode in (0, 5), out.stderr
    data = json.loads(out.stdout)
    rec = next(f for f in data["files"] if f["path"].endswith("kernel.cubin"))
    assert rec["package"] == "triton-cache" and rec["entries"][0]["arch"] == "sm_90a"
    assert any("site-packages" in r or "dist-packages" in r for r in data["roots"])


def test_cli_verify_with_cuobjdump(cuda_fixtures, cuobjdump):
    if cuobjdump is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    out = _cli(str(cuda_fixtures.dir), "--verify-with-cuobjdump", "--json", "--target", "sm_90", "--no-cache")
    assert out.returncode == 0, out.stdout[-2000:]
    v = json.loads(out.stdout)["verify"]
    assert v["files_checked"] >= 12 and v["files_agree"] == v["files_checked"] and not v["disagreements"]
