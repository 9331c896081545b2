"""scripts/publish_predictions.py: one command rebuilds every published prediction set for a GPU."""

from __future__ import annotations

from tests.scripts.conftest import load_script


def test_one_command_asks_every_published_release_then_indexes(tmp_path, capsys):
    pp = load_script("publish_predictions")
    versions = pp.published_versions()
    assert "0.26.0" in versions and "0.33.0" in versions  # the folders of matrices/predicted/
    rc = pp.main(["--targets", "sm_125", "--venvs", str(tmp_path), "--static", "--dry-run"])
    out = capsys.readouterr().out.splitlines()
    predicts = [line for line in out if " predict " in line]
    assert rc == 0 and len(predicts) == len(versions)
    assert all("--target sm_125" in line and str(tmp_path) in line for line in predicts)
    assert "publish_static_predictions.py" in out[-2] and "--index matrices/" in out[-1]


def test_a_missing_venv_is_reported_and_the_exit_is_1(tmp_path, capsys):
    pp = load_script("publish_predictions")
    rc = pp.main(["--versions", "0.33.0", "--venvs", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert rc == 1 and "vLLM 0.33.0: no venv" in err and "--create" in err
