"""scripts/flashinfer_aot.py on a stand-in JitSpec (C files, ninja, cc): objects compiled on one host, packed,
carried, linked and installed on another."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.scripts.conftest import load_script

aot = load_script("flashinfer_aot")
GEN = ["--generator", "tests.scripts.fake_jitspec:make"]
pytestmark = pytest.mark.skipif(
    not (shutil.which("ninja") and shutil.which("cc")), reason="needs ninja and cc"
)


def test_compile_on_one_host_link_and_install_on_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_JITSPEC_ROOT", str(tmp_path / "cpu-host"))
    assert aot.main([*GEN, "build", "--compile-only", "--jobs", "2"]) == 0
    assert not (tmp_path / "cpu-host" / "aot").exists()
    objects = tmp_path / "objects.tar.xz"
    assert aot.main([*GEN, "objects", "--pack", str(objects)]) == 0

    monkeypatch.setenv("FAKE_JITSPEC_ROOT", str(tmp_path / "gpu-host"))
    report = tmp_path / "report.json"
    assert aot.main([*GEN, "build", "--objects", str(objects), "--report", str(report)]) == 0
    summary = json.loads(report.read_text())
    assert (summary["carried"], summary["compiled"], summary["failed"], summary["link_rc"]) == (2, 0, 0, 0)
    installed = tmp_path / "gpu-host" / "aot" / "fused_moe_test" / "fused_moe_test.so"
    assert summary["aot_path"] == str(installed) and installed.read_bytes()[:4] == b"\x7fELF"


def test_a_failed_compile_installs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_JITSPEC_ROOT", str(tmp_path))
    monkeypatch.setenv("CPATH", "")
    spec = aot.load_spec("tests.scripts.fake_jitspec:make")
    spec.write_ninja()
    monkeypatch.setattr(aot, "commands", lambda s: ["cc -c /nonexistent.c -o /tmp/x.o", "true -o x.so"])
    assert aot.build(spec, None, 1, None) == 1
    assert not (tmp_path / "aot").exists()


def test_exactly_one_of_sm_and_generator(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exc:
        aot.main(["build"])
    assert exc.value.code == 2 and "--sm" in capsys.readouterr().err
