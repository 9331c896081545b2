"""``probe run --reuse``: a rebuild that changed nothing re-runs nothing; a FlashInfer-only change re-runs
exactly the cells that run on FlashInfer; what cannot be digested, or an unknown GPU, is never copied
(real runs of fixture cells over fake package trees)."""

from __future__ import annotations

import json

import pytest

from probe.run import RunOptions, run_plan
from tests.run.conftest import cell, write_dist

pytestmark = pytest.mark.slow  # three or four runs of real sandboxed cells each

CELLS = (
    cell("import", "import"),
    cell("moe/marlin", "moe", backend="marlin", quant="nvfp4"),
    cell("moe/triton", "moe", backend="triton", quant="bf16"),
    cell("moe/flashinfer_cutlass", "moe", backend="flashinfer_cutlass", quant="bf16"),
    cell("moe/flashinfer_trtllm", "moe", backend="flashinfer_trtllm", quant="fp8"),
    cell("attention/FLASHINFER", "attention", backend="FLASHINFER", num_heads=8, head_dim=64),
    cell("attention/TRITON_ATTN", "attention", backend="TRITON_ATTN", num_heads=8, head_dim=64),
    cell("attention/FLASH_ATTN/fa3", "attention", backend="FLASH_ATTN", fa_version=3, num_heads=8),
    cell("engine/auto+auto", "engine", moe_backend="auto", attention_backend="auto", model="x"),
)
FLASHINFER = {"import", "moe/flashinfer_cutlass", "moe/flashinfer_trtllm", "attention/FLASHINFER"}
FLASHINFER |= {"engine/auto+auto"}  # an engine may run on anything


def _run(tmp_path, name: str, site, **kw):
    opts = RunOptions(cells=CELLS, journal=tmp_path / f"{name}.jsonl", output=tmp_path / f"{name}.json",
                      site_dirs=(str(site),), **kw)  # fmt: skip
    return run_plan(opts)


def test_only_what_a_rebuild_changed_runs_again(tmp_path, site, fake_gpu):
    first = _run(tmp_path, "first", site)
    assert len(first.ran) == len(CELLS) and not first.reused
    inputs = first.results[1].details["reuse"]
    assert inputs["run"] == first.run_id and inputs["inputs"]["gpu"] == "NVIDIA H200 (9.0)"
    assert inputs["inputs"]["cuda"] == "13.0" and "flashinfer" not in inputs["inputs"]  # marlin: not on it

    same = _run(tmp_path, "same", site, reuse=str(tmp_path / "first.json"))
    assert same.ran == () and len(same.reused) == len(CELLS)
    assert {r.details["reused_from"] for r in same.results} == {first.run_id}
    matrix = json.loads((tmp_path / "same.json").read_text())
    assert matrix["run"]["status"] == "complete" and len(matrix["cells"]) == len(CELLS)

    write_dist(site, "flashinfer-python", "0.6.14", {"flashinfer/__init__.py": "patched = True\n"})
    rebuilt = _run(tmp_path, "rebuilt", site, reuse=str(tmp_path / "same.jsonl"))
    assert {r.id for r in rebuilt.ran} == FLASHINFER
    assert {r.id for r in rebuilt.reused} == {c.id for c in CELLS} - FLASHINFER
    assert {r.details["reused_from"] for r in rebuilt.reused} == {first.run_id}  # the run that measured it
    why = rebuilt.plan.cells[0].why if rebuilt.plan else None
    assert why is not None and why.startswith("changed: flashinfer (")


def test_nothing_is_copied_without_a_known_gpu_or_a_digest(tmp_path, site, fake_gpu, monkeypatch):
    _run(tmp_path, "first", site)
    editable_url = '{"url": "file:///s", "dir_info": {"editable": true}}'
    write_dist(site, "triton", "3.6.0", meta={"direct_url.json": editable_url})
    editable = _run(tmp_path, "editable", site, reuse=str(tmp_path / "first.json"))
    triton = {"moe/triton", "attention/TRITON_ATTN", "import", "engine/auto+auto"}
    assert {r.id for r in editable.ran} == triton
    assert all("triton cannot be digested" in (c.why or "") for c in editable.plan.cells)
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    blind = _run(tmp_path, "blind", site, reuse=str(tmp_path / "first.json"))
    assert len(blind.ran) == len(CELLS) and not blind.reused
    assert {c.why for c in blind.plan.cells} == {"the GPU is not known here (no nvidia-smi answer)"}
