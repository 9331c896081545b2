"""The lean hot path (dataclass records, fast inflaters) against the validated definitions:
pydantic models of the JSON contract, plain zlib."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from dataclasses import fields
from pathlib import Path

import jsonschema
import pytest

from probe.arch import model, schema, wheel
from probe.arch.scan import scan_file, scan_paths
from probe.arch.verdicts import file_codes

REPO = Path(__file__).resolve().parents[2]
CLASSES = ("Entry", "KernelInfo", "FileRecord", "Target", "TargetVerdict", "FileVerdict", "Summary",
           "VerifyReport", "ScanReport")


@pytest.mark.parametrize("name", CLASSES)
def test_dataclasses_and_pydantic_models_define_the_same_fields(name):
    lean = {f.name for f in fields(getattr(model, name))}
    strict = set(getattr(schema, name).model_fields)
    assert lean == strict, name


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "probe", "scan", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def test_real_json_output_validates_against_the_contract(tmp_path, cuda_fixtures):
    """Real scans (files, a deflated wheel, --kernels) written by the lean path: the pydantic models
    and the JSON Schema of ``probe scan --schema`` accept them; key order is the contract's."""
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
        report = schema.validate_report(out.stdout)
        jsonschema.validate(data, json_schema)
        assert list(data) == list(schema.ScanReport.model_fields)
        assert list(data["files"][0]) == list(schema.FileRecord.model_fields)
        assert list(data["files"][0]["entries"][0]) == list(schema.Entry.model_fields)
        assert list(data["verdicts"][0]["targets"]["sm_90"]) == list(schema.TargetVerdict.model_fields)
        assert any(f["path"].endswith("!fx/multi.so") for f in data["files"])
        with_code = [f for f in model.ScanReport.model_validate(data).files if file_codes(f)]
        assert len([v for v in report.verdicts if v.kernel is None]) == len(with_code) > 0
        # the lean classes read their own output back unchanged
        assert model.ScanReport.model_validate(data).to_dict() == data
        if extra:
            assert any(f["kernels"] for f in data["files"])


def _available_inflaters() -> list[str]:
    out = []
    for name in wheel.INFLATERS:
        try:
            if name == "zlib-ng":
                import zlib_ng  # noqa: F401
            elif name == "isal":
                import isal  # noqa: F401
        except ImportError:
            continue
        out.append(name)
    return out


@pytest.mark.parametrize("name", wheel.INFLATERS)
def test_every_inflater_streams_members_like_the_files_on_disk(name, tmp_path, cuda_fixtures, monkeypatch):
    if name not in _available_inflaters():
        pytest.skip(f"{name} is not installed (pip install probe[fast])")
    monkeypatch.setenv("PROBE_INFLATE", name)
    wheel.inflater.cache_clear()
    try:
        assert wheel.inflater()[0] == name
        # force the streaming reader with tiny pieces: many calls, unconsumed tails, capped output
        monkeypatch.setattr(wheel, "SMALL_MEMBER", 1000)
        monkeypatch.setattr(wheel, "IN_CHUNK", 1024)
        monkeypatch.setattr(wheel, "OUT_MAX", 4096)
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
                disk.error, disk.kind, disk.containers, disk.relocatable_containers), m
            assert [(e.arch, e.section, e.container, e.size) for e in r.entries] == [
                (e.arch, e.section, e.container, e.size) for e in disk.entries], m
    finally:
        wheel.inflater.cache_clear()
