"""probe's fast config reader agrees with vLLM's own reading of the same real configs.

tests/data/configs/<model>/ holds real config.json files (sources in SOURCES.json);
tests/data/configs/vllm_reading.json is what vLLM built from each — every attention layer's
selector inputs, the KV-less layers, the routed experts with their quant scheme, the quant method —
recorded by ``python3 scripts/read_configs_with_vllm.py --python VENV/bin/python -o
tests/data/configs/vllm_reading.json`` (probe/oracle/child_model.py in that venv). This test needs
no vLLM: it reads the same files with probe's reader (no torch, no vLLM) and compares field by field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.modelcfg.config_reader import profile_from_path
from probe.modelcfg.layer_spec import layer_spec, spec_differences

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
READING = json.loads((DATA / "vllm_reading.json").read_text(encoding="utf-8"))
SOURCES = json.loads((DATA / "SOURCES.json").read_text(encoding="utf-8"))["configs"]
FOLDERS = sorted(p.name for p in DATA.iterdir() if (p / "config.json").is_file())

# Configs vLLM cannot read here, with the reason; their fast reading is checked against the rule in
# vLLM's model code instead (tests/catalog/test_config_reading.py).
NOT_READ_BY_VLLM = {
    "nvidia--Llama-3_3-Nemotron-Super-49B-v1": (
        "trust_remote_code",
        "nemotron-nas needs the repository's configuration_decilm.py (custom code), not vendored",
    ),
}


def test_every_config_has_a_source_and_a_vllm_reading():
    assert FOLDERS and set(FOLDERS) == set(SOURCES) == set(READING["readings"])
    for folder, entry in SOURCES.items():
        assert entry["hf_id"] and entry["hf_id"].count("/") == 1, folder
        assert set(entry["files"]) == {p.name for p in (DATA / folder).iterdir()}, folder
        for text in entry["files"].values():
            assert "vendored copy of the Hugging Face" in text and ("pypi" in text or "github" in text)
    assert READING["vllm"] and READING["sm"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_fast_reader_agrees_with_vllm(folder):
    reading = READING["readings"][folder]
    prof = profile_from_path(DATA / folder)
    if folder in NOT_READ_BY_VLLM:
        assert NOT_READ_BY_VLLM[folder][0] in reading["error"]
        return
    assert "error" not in reading, reading.get("error")
    assert spec_differences(layer_spec(prof), reading["spec"]) == []
    facts = reading["config"]
    assert prof.quant_scheme is not None and prof.quant_scheme.method == facts["quant_method"]
    assert prof.num_hidden_layers == facts["num_hidden_layers"]
    assert prof.architectures[0] == facts["architecture"] and facts["registered"] is True
    custom = any(name.startswith("custom:") for name, _ in prof.mixer_layers)  # DeepSeek-V4: MLA of its own
    assert (any(k.mla for k in prof.layer_kinds()) or custom) == facts["use_mla"]


def test_at_least_thirty_real_configs_agree():
    agree = 0
    for folder in FOLDERS:
        reading = READING["readings"][folder]
        if "spec" in reading and not spec_differences(
            layer_spec(profile_from_path(DATA / folder)), reading["spec"]
        ):
            agree += 1
    assert agree >= 30
    moe = [f for f in FOLDERS if READING["readings"][f].get("spec", {}).get("moe")]
    assert len(moe) >= 20 and len(FOLDERS) - len(moe) >= 10  # MoE and dense alike


def test_a_disagreement_is_reported_field_by_field():
    reading = READING["readings"]["google--gemma-4-26B-A4B"]["spec"]
    prof = profile_from_path(DATA / "google--gemma-4-26B-A4B")
    spec = layer_spec(prof)
    spec["attention"][1] = {**spec["attention"][1], "head_size": 256}  # a reader that ignored global_head_dim
    spec["moe"][0] = {**spec["moe"][0], "scheme": "nvfp4"}
    diffs = spec_differences(spec, reading)
    assert [d.split(":")[0] for d in diffs] == ["attention", "moe"]


def _catalog_matches() -> list[tuple[str, str]]:
    from probe.catalog.models import load_profiles

    by_id = {entry["hf_id"].lower(): folder for folder, entry in SOURCES.items()}
    return [
        (prof.name, by_id[i.lower()])
        for prof in load_profiles()
        for ids in prof.hf_repo_ids.values()
        for i in ids
        if i.lower() in by_id and "spec" in READING["readings"][by_id[i.lower()]]
    ]


@pytest.mark.parametrize(("name", "folder"), _catalog_matches())
def test_packaged_profiles_agree_with_vllms_reading_of_their_checkpoints(name, folder):
    """The catalog's hand-written profiles, read per layer, match what vLLM builds from the real
    config of each checkpoint they name (the experts' quant aside: a profile covers several)."""
    from probe.catalog.models import find_profile

    spec = layer_spec(find_profile(name))
    vllm = json.loads(json.dumps(READING["readings"][folder]["spec"]))
    for m in [*spec["moe"], *vllm["moe"]]:
        m["scheme"] = None
    assert spec_differences(spec, vllm) == []


def test_the_catalog_is_checked_against_real_configs():
    assert len({name for name, _ in _catalog_matches()}) >= 15
