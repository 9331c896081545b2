"""vLLM's own reading of real configs (probe/oracle/child_model.py in a real vLLM venv, CPU only)
agrees with probe's fast reader; skipped with the reason when the venv is absent
(tests/oracle/real_vllm.py). Importing the real vLLM and building the models on the meta device: ~1 min."""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.modelcfg.config_reader import profile_from_path
from probe.modelcfg.layer_spec import layer_spec, spec_differences
from probe.oracle.read_model import read_with_vllm
from tests.oracle.real_vllm import MARKS, PY

pytestmark = MARKS
DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
FOLDERS = (
    "google--gemma-4-26B-A4B",  # sliding d=256 + global d=512 layers, top_k_experts
    "nvidia--Qwen3.6-35B-A3B-NVFP4",  # GDN layers; MIXED_PRECISION: W4A16 NVFP4 experts
    "deepseek-ai--DeepSeek-V3.2",  # sparse MLA (an indexer per layer)
    "openai--gpt-oss-20b",  # sinks on sliding and full layers, MXFP4 experts
)


@pytest.fixture(scope="module")
def readings() -> dict[str, dict]:
    out = read_with_vllm([str(DATA / f) for f in FOLDERS], python=str(PY), timeout_s=900)
    assert str(out["vllm"]).startswith("0.33")
    return {Path(r["path"]).name: r for r in out["readings"]}


@pytest.mark.parametrize("folder", FOLDERS)
def test_vllm_reads_the_config_as_probe_does(readings, folder):
    reading = readings[folder]
    assert "error" not in reading, reading.get("error")
    prof = profile_from_path(DATA / folder)
    assert spec_differences(layer_spec(prof), reading["spec"]) == []
    assert reading["config"]["quant_method"] == prof.quant_scheme.method
    assert reading["config"]["registered"] is True


def test_a_config_vllm_cannot_read_is_an_answer_not_a_crash(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"architectures": ["NoSuchModelForCausalLM"], "model_type": "nosuch"}'
    )
    out = read_with_vllm([str(tmp_path)], python=str(PY), timeout_s=900)
    assert out["readings"][0]["error"]
