"""The one definition of the scan output (probe.arch.records) against real output: validation
and JSON Schema derived from the same classes, key order, round trips; fast inflaters vs zlib."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from dataclasses import fields
from pathlib import Path

import jsonschema
import pydantic
import pytest

from probe.arch import inflate, records, wheel
from probe.arch.scanner import scan_file, scan_paths
from probe.arch.verdicts import file_codes

REPO = Path(__file__).resolve().parents[2]


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def test_schema_is_derived_from_the_records():
    """Every record field is in the JSON Schema, in declaration order, and nothing else is."""
    sch = records.json_schema()
    defs = sch["$defs"]
    for cls in (
        records.Entry,
        records.KernelInfo,
        records.FileRecord,
        records.Target,
        records.TargetVerdict,
        records.FileVerdict,
        records.Summary,
        records.VerifyReport,
    ):
        assert list(defs[cls.__name__]["properties"]) == _names(cls), cls.__name__
        assert defs[cls.__name__]["additionalProperties"] is False
    assert list(sch["properties"]) == _names(records.ScanReport)
    assert defs["Entry"]["properties"]["suffix"]["enum"] == ["", "a", "f"]
    assert defs["Entry"]["properties"]["container"]["minimum"] == 0


def test_validation_rejects_what_the_contract_forbids():
    good = {
        "probe_version": "0",
        "files": [
            {
                "path": "/x",
                "entries": [
                    {
                        "section": "cubin",
                        "container": 0,
                        "kind": "sass",
                        "arch": "sm_90",
                        "sm": 90,
                        "suffix": "",
                        "loadable": True,
                        "size": 1,
                    }
                ],
            }
        ],
    }
    rep = records.validate_report(good)
    assert isinstance(rep.files[0].entries[0], records.Entry) and rep.files[0].entries[0].arch == "sm_90"
    for path, bad in (
        (("files", 0), {"bogus": 1}),
        (("files", 0, "entries", 0), {"suffix": "x"}),
        (("files", 0, "entries", 0), {"container": -1}),
        (("files", 0), {"kind": "zip"}),
    ):
        doc = json.loads(json.dumps(good))
        node = doc
        for k in path:
            node = node[k]
        node.update(bad)
        with pytest.raises(pydantic.ValidationError):
            records.validate_report(doc)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "probe", "scan", *args], capture_output=True, text=True, cwd=REPO, timeout=300
    )


@pytest.mark.slow
def test_real_json_output_validates_against_the_contract(tmp_path, cuda_fixtures):
    """Real scans (files, a deflated wheel, --kernels): validation and the JSON Schema of
    ``probe scan --schema`` accept them; key order is the records' field order."""
    whl = tmp_path / "fx-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        for m in ("multi.so", "rdc.so", "sm_100f.cubin"):
            z.write(cuda_fixtures.path(m), f"fx/{m}")
        z.writestr("fx-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    sch = _cli("--schema")
    assert sch.returncode == 0, sch.stderr
    json_schema = json.loads(sch.stdout)
    for extra in ([], ["--kernels"]):
        out = _cli(str(cuda_fixtures.dir), str(whl), "--json", "--all-targets", "--no-cache", *extra)
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        report = records.validate_report(out.stdout)
        jsonschema.validate(data, json_schema)
        written = [n for n in _names(records.ScanReport) if n not in records.OMIT_WHEN_NONE]
        assert list(data) == written  # no image input: no "environments"
        assert list(data["files"][0]) == [n for n in _names(records.FileRecord) if n != "package_version"]
        assert {f.get("package_version") for f in data["files"] if "!" in f["path"]} == {"1.0"}
        assert list(data["files"][0]["entries"][0]) == _names(records.Entry)
        assert list(data["verdicts"][0]["targets"]["sm_90"]) == _names(records.TargetVerdict)
        assert any(f["path"].endswith("!fx/multi.so") for f in data["files"])
        with_code = [f for f in records.ScanReport.from_dict(data).files if file_codes(f)]
        assert len([v for v in report.verdicts if v.kernel is None]) == len(with_code) > 0
        # validated or not, the records read their own output back unchanged
        assert records.ScanReport.from_dict(data).to_dict() == data
        assert report.to_dict() == data
        if extra:
            assert any(f["kernels"] for f in data["files"])


def _available_inflaters() -> list[str]:
    out = []
    for name in inflate.INFLATERS:
        try:
            if name == "zlib-ng":
                import zlib_ng  # noqa: F401
            elif name == "isal":
                import isal  # noqa: F401
        except ImportError:
            continue
        out.append(name)
    return out


@pytest.mark.parametrize("name", inflate.INFLATERS)
def test_every_inflater_streams_members_like_the_files_on_disk(name, tmp_path, cuda_fixtures, monkeypatch):
    if name not in _available_inflaters():
        pytest.skip(f"{name} is not installed (pip install probe[fast])")
    monkeypatch.setenv("PROBE_INFLATE", name)
    inflate.inflater.cache_clear()
    try:
        assert inflate.inflater()[0] == name
        # force the streaming reader with tiny pieces: many calls, unconsumed tails, capped output
        monkeypatch.setattr(wheel, "SMALL_MEMBER", 1000)
        monkeypatch.setattr(inflate, "IN_CHUNK", 1024)
        monkeypatch.setattr(inflate, "OUT_MAX", 4096)
        whl = tmp_path / "fx-1.0-py3-none-any.whl"
        members = ("multi.so", "rdc.so", "ptxonly.so", "none.so", "sm_90a.cubin")
        with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
            for m in members:
                z.write(cuda_fixtures.path(m), f"fx/{m}")
            z.writestr("fx-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        recs = scan_paths([whl], use_cache=False)
        assert [r.path.rsplit("!", 1)[1] for r in recs] == [f"fx/{m}" for m in members]
        for r, m in zip(recs, members, strict=True):
            disk = scan_file(str(cuda_fixtures.path(m)))
            assert (r.error, r.kind, r.containers, r.relocatable_containers) == (
                disk.error,
                disk.kind,
                disk.containers,
                disk.relocatable_containers,
            ), m
            assert [(e.arch, e.section, e.container, e.size) for e in r.entries] == [
                (e.arch, e.section, e.container, e.size) for e in disk.entries
            ], m
    finally:
        inflate.inflater.cache_clear()
