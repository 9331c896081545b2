"""scripts/plan_flashinfer_cells.py: valid, unique cells; the published H100 matrix is exactly its plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.cells import CellSpec
from tests.scripts.conftest import ROOT, load_script

plan = load_script("plan_flashinfer_cells")
MEASURED = ("attention", "moe", "engine-flashinfer-attention", "engine-flashinfer-moe")


def test_plans_are_valid_unique_cells(tmp_path: Path):
    paths = plan.write_plans(tmp_path)
    cells = {name: json.loads(path.read_text()) for name, path in paths.items()}
    ids = [CellSpec.model_validate(c).id for name in cells for c in cells[name]]
    assert all(cells.values()) and len(ids) == len(set(ids))
    attn = cells["attention"]
    assert {c["params"]["head_dim"] for c in attn} == {64, 128, 256}
    assert all(c["params"]["sinks"] for c in attn if c["params"]["model"] == "gpt-oss-120b")
    assert {c["params"]["fa_version"] for c in attn if c["params"]["backend"] == "FLASH_ATTN"} == {2, 3, 4}
    fa2 = [i for i, c in enumerate(attn) if c["params"]["fa_version"] == 2]
    assert fa2 == list(range(len(attn) - len(fa2), len(attn)))  # FA2 last: minutes of driver PTX JIT
    assert {c["params"]["quant"] for c in cells["moe"]} == set(plan.QUANTS)
    assert all(c["timeout_s"] >= 1200 for c in cells["moe"])
    assert all("/auto+" in c["id"] for c in cells["engine-flashinfer-attention"])
    assert all(c["params"]["moe_backend"] == "flashinfer_cutlass" for c in cells["engine-flashinfer-moe"])
    assert all(c["params"]["mla"] for c in cells["mla"])


def test_the_published_h100_matrix_measured_these_plans(tmp_path: Path):
    paths = plan.write_plans(tmp_path)
    planned = {c["id"] for name in MEASURED for c in json.loads(paths[name].read_text())}
    matrix = json.loads((ROOT / "matrices/measured/nvidia-h100-sm90-vllm-0.26.0.json").read_text())
    assert planned == {c["id"] for c in matrix["cells"]}
    assert matrix["run"]["cells_planned"] == len(planned)


def test_main_prints_the_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert plan.main(["--out", str(tmp_path)]) == 0
    assert "moe: 48 cells" in capsys.readouterr().out
    assert (tmp_path / "attention.json").is_file()
