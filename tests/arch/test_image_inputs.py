"""Image inputs among the others: the per-input dispatch (a plain scan never imports
``probe.arch.image``), ``package_version`` / ``environments`` in the JSON contract, and text named
like a library (GNU ld scripts) skipped without an error in images and folders alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

from probe.arch import records
from probe.arch.inputs import looks_like_image
from probe.arch.jsonout import dumps
from probe.arch.scanner import scan_inputs, scan_paths
from probe.cli.main import main
from tests.arch.image_build import compress, tar_members, write_docker_save, write_oci_layout

REPO = Path(__file__).resolve().parents[2]
SITE = "usr/lib/python3.12/site-packages"
LD_SCRIPT = b"/* GNU ld script\n   Use the shared library.  */\nGROUP ( /lib/x86_64-linux-gnu/libc.so.6 )\n"


@pytest.fixture
def fx(cuda_fixtures) -> Path:  # type: ignore[no-untyped-def]
    return Path(cuda_fixtures.dir)


def _members(fx: Path, *, cut: bool = False) -> list[tuple]:
    out: list[tuple] = [
        ("usr/lib/x86_64-linux-gnu/libc.so", LD_SCRIPT),
        ("usr/lib/x86_64-linux-gnu/libm.so.6", b"INPUT ( libm.so.6 )\n"),
        (f"{SITE}/vllm/_moe_C.abi3.so", fx / "multi.so"),
        (f"{SITE}/vllm-0.33.0.dist-info/RECORD", b"vllm/_moe_C.abi3.so,,\nvllm/__init__.py,,\n"),
        (f"{SITE}/vllm-0.33.0.dist-info/METADATA", b"Name: vllm\n"),
        (f"{SITE}/noversion/k.cubin", fx / "sm_90a.cubin"),
    ]
    if cut:  # a real ELF cut short: stays an error
        out.append((f"{SITE}/vllm/cut.so", (fx / "multi.so").read_bytes()[:3000]))
    return out


def _folder(root: Path, members: list[tuple]) -> Path:
    for name, src in members:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(src.read_bytes() if isinstance(src, Path) else src)
    return root


def _image(tmp: Path, members: list[tuple], fmt: str = "oci") -> Path:
    t = tmp / "layer.tar"
    tar_members(t, members)
    blob = compress(t, "gzip")
    if fmt == "docker":
        return write_docker_save(tmp / "img.tar", [blob])
    return write_oci_layout(tmp / "oci", {"linux/amd64": [blob]})


def _cli_json(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    rc = main(["scan", "--no-cache", "--target", "sm_90a", "--json", str(path)])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["folder", "oci", "docker"])
def test_ld_scripts_are_skipped_and_cut_elf_is_an_error(
    tmp_path: Path, fx: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for cut in (False, True):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        members = _members(fx, cut=cut)
        src = _folder(d / "root", members) if kind == "folder" else _image(d, members, kind)
        rc, out = _cli_json(src, capsys)
        by = {f["path"].split("!/", 1)[-1].split("/root/", 1)[-1]: f for f in out["files"]}
        for ld in ("usr/lib/x86_64-linux-gnu/libc.so", "usr/lib/x86_64-linux-gnu/libm.so.6"):
            assert by[ld]["kind"] == "other" and by[ld]["error"] is None and by[ld]["entries"] == [], ld
        if cut:
            assert rc == 5 and "truncated" in by[f"{SITE}/vllm/cut.so"]["error"]
            assert out["summary"]["errors"] == 1
        else:
            assert rc == 0 and out["summary"]["errors"] == 0, out["files"]


def test_package_version_and_environments_in_the_json(
    tmp_path: Path, fx: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    members = _members(fx)
    img = _image(tmp_path, members)
    folder = _folder(tmp_path / "root", members)
    rc_i, from_image = _cli_json(img, capsys)
    rc_f, from_folder = _cli_json(folder, capsys)
    assert rc_i == rc_f == 0
    schema = records.json_schema()
    for data in (from_image, from_folder):
        records.validate_report(data)
        jsonschema.validate(data, schema)
        by = {f["path"].rsplit(SITE + "/", 1)[-1]: f for f in data["files"]}
        assert by["vllm/_moe_C.abi3.so"]["package"] == "vllm"
        assert by["vllm/_moe_C.abi3.so"]["package_version"] == "0.33.0"
        # unknown: the key is left out (a report without versions is as it was)
        assert by["noversion/k.cubin"]["package"] == "noversion"
        assert "package_version" not in by["noversion/k.cubin"]
        assert list(by["noversion/k.cubin"]) == [
            n for n in records.FileRecord._field_names if n != "package_version"
        ]
    assert "environments" not in from_folder
    assert from_image["environments"] == [{"site": f"{img}!/{SITE}", "packages": {"vllm": "0.33.0"}}]
    assert list(from_image)[:4] == ["schema_version", "probe_version", "roots", "environments"]
    back = records.ScanReport.from_dict(from_image)
    assert back.environments == [records.Environment(site=f"{img}!/{SITE}", packages={"vllm": "0.33.0"})]
    assert back.to_dict() == from_image
    props = schema["$defs"]["FileRecord"]["properties"]
    assert "package_version" in props and "package_version" not in schema["$defs"]["FileRecord"].get(
        "required", []
    )
    assert "environments" in schema["properties"] and "environments" not in schema.get("required", [])


def test_no_version_known_means_the_json_is_unchanged(tmp_path: Path, fx: Path) -> None:
    """Records without a version write exactly the keys, in the order, of schema_version 1 as
    first published (so their JSON text is unchanged)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "k.cubin").write_bytes((fx / "sm_90a.cubin").read_bytes())
    res = scan_inputs([tmp_path], use_cache=False)
    assert res.environments is None
    (f,) = res.files
    assert f.package_version is None
    v1_file = ["path", "error", "size", "kind", "package", "containers", "relocatable_containers"]
    assert list(f.to_dict()) == [*v1_file, "entries", "kernels", "cached"]
    rep = records.ScanReport(probe_version="0", files=res.files)
    v1_report = ["schema_version", "probe_version", "roots", "files", "summary", "targets", "verdicts"]
    assert list(json.loads(dumps(rep, lines=True))) == [*v1_report, "verify", "backends"]
    f.package_version = "1.0"
    assert list(f.to_dict())[5] == "package_version"


def test_folder_versions_from_dist_info_and_wheel_names(tmp_path: Path, fx: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    _folder(
        site,
        [
            ("flash_attn/k.so", fx / "multi.so"),
            ("flash_attn-2.8.3.dist-info/RECORD", b"flash_attn/k.so,,\n"),
            ("Foo_Bar-1.0rc1.dist-info/METADATA", b"Name: Foo-Bar\n"),
            ("foo/x.cubin", fx / "sm_90a.cubin"),  # top folder foo: no foo-*.dist-info
        ],
    )
    whl = tmp_path / "fx_pkg-3.2.1-1-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.write(fx / "sm_90a.cubin", "fx_pkg/a.cubin")
        z.writestr("fx_pkg-3.2.1.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    got = {
        Path(f.path).name: (f.package, f.package_version) for f in scan_paths([site, whl], use_cache=False)
    }
    assert got["k.so"] == ("flash-attn", "2.8.3")
    assert got["x.cubin"] == ("foo", None)
    assert got["a.cubin"] == ("fx-pkg", "3.2.1")  # the wheel's member: from the wheel's file name


def test_dispatch_tests_only_the_inputs(tmp_path: Path, fx: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    layout = _image(tmp_path / "a", _members(fx))
    docker = _image(tmp_path / "b", _members(fx), "docker")
    unnamed = docker.rename(tmp_path / "b" / "image")  # no .tar: a tar header with a good checksum
    assert looks_like_image(str(layout)) and looks_like_image(str(unnamed))
    assert not looks_like_image(str(fx)) and not looks_like_image(str(fx / "multi.so"))
    assert not looks_like_image(str(tmp_path / "missing.tar"))
    res = scan_inputs([unnamed, fx / "multi.so"], use_cache=False)
    assert res.files[0].path.startswith(f"{unnamed}!/") and res.files[-1].path == str(fx / "multi.so")
    assert res.environments and res.environments[0].packages == {"vllm": "0.33.0"}
    # an image inside a scanned folder is walked like any folder (its blobs are not device code)
    assert all("!" not in f.path for f in scan_paths([tmp_path], use_cache=False))


def _imported(*paths: Path) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "probe",
            "scan",
            "--no-cache",
            "--target",
            "sm_90",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stderr


def test_a_plain_scan_does_not_import_the_image_reader(tmp_path: Path, fx: Path) -> None:
    folder = _folder(tmp_path / "root", _members(fx))
    assert "probe.arch.image" not in _imported(folder, fx / "multi.so")
    assert "probe.arch.image.reader" in _imported(_image(tmp_path, _members(fx)))
