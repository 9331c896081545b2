"""``probe merge`` writes a fleet through the document writer (a fleet is no ``Matrix``)."""

from __future__ import annotations

import argparse

from probe.cli import merge as merge_cli
from probe.matrix.io import load_document
from probe.matrix.schema import Fleet

from . import fixtures


def test_merge_writes_a_fleet_that_loads_back(tmp_path, capsys):
    paths = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.json"
        fixtures.write_matrix(fixtures.matrix("baseline"), path)
        paths.append(str(path))
    out = tmp_path / "fleet.json"
    assert merge_cli.execute(argparse.Namespace(matrices=paths, output=str(out))) == 0
    fleet = load_document(out)
    assert isinstance(fleet, Fleet) and len(fleet.matrices) == 1  # two runs of one GPU + image
    assert "1 column" in capsys.readouterr().out
