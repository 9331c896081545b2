"""Bad matrix files: a clear message and exit 6, never a traceback; no pickle, no eval."""

from __future__ import annotations

import json
import pickle

import pytest

from probe.errors import BadInputError
from probe.matrix.io import load_document


def _doc(data_dir):
    return json.loads((data_dir / "baseline.json").read_text())


def _write(tmp_path, doc, name="m.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


def _mutations():
    def dup(d):
        d["cells"].append(dict(d["cells"][1]))

    def outcome(d):
        d["cells"][1]["outcome"] = "sort_of_ok"

    def version(d):
        d["schema_version"] = 2

    def cc(d):
        d["provenance"]["gpu"]["cc"] = "9.0"

    def measured_elsewhere(d):
        d["cells"][1]["gpu_sm"] = 90

    def child_gpu(d):
        d["cells"][0]["details"]["gpu"]["cc"] = "12.0"

    def reported_no_citation(d):
        d["cells"][1]["evidence"] = "reported"

    def extra_field(d):
        d["cells"][1]["surprise"] = 1

    def kind(d):
        d["kind"] = "spreadsheet"

    return {
        "duplicate cell id": dup,
        "outcome not in vocabulary": outcome,
        "schema_version": version,
        "gpu cc vs sm": cc,
        "measured cell on another GPU": measured_elsewhere,
        "import cell ran on another GPU": child_gpu,
        "reported without citation": reported_no_citation,
        "unknown field": extra_field,
        "unknown kind": kind,
    }


@pytest.mark.parametrize("what", sorted(_mutations()))
def test_inconsistent_matrix_is_bad_input(tmp_path, data_dir, what, probe_cli):
    doc = _doc(data_dir)
    _mutations()[what](doc)
    path = _write(tmp_path, doc)
    with pytest.raises(BadInputError):
        load_document(path)
    r = probe_cli("show", str(path))
    assert r.returncode == 6, r.stderr
    assert "Traceback" not in r.stderr
    assert str(path) in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("content", ["{not json", "", "[1, 2]", '"a string"'])
def test_not_a_matrix(tmp_path, content, probe_cli):
    path = _write(tmp_path, content)
    for args in (
        ["show", str(path)],
        ["gate", "--baseline", str(path), "--current", str(path)],
        ["diff", str(path), str(path)],
        ["merge", str(path), "-o", str(tmp_path / "f.json")],
        ["recommend", "--model", "122b", "--matrix", str(path)],
    ):
        r = probe_cli(*args)
        assert r.returncode == 6, (args, r.stderr)
        assert "Traceback" not in r.stderr


def test_pickle_is_not_loaded(tmp_path, probe_cli):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"schema_version": 1})
    path = tmp_path / "m.json"
    path.write_bytes(payload)
    r = probe_cli("show", str(path))
    assert r.returncode == 6
    assert not marker.exists()


def test_missing_file_is_usage_error(tmp_path, probe_cli):
    r = probe_cli("show", str(tmp_path / "nope.json"))
    assert r.returncode == 2
    assert "no such file" in r.stderr
