"""The profile type: the packaged files load and dump unchanged; malformed files are rejected."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, get_args

import pytest

from probe.catalog.models import load_profiles
from probe.catalog.profile import profile_from_dict
from probe.catalog.quants import QUANTS, Quant


def _raw(name: str = "qwen3.5-122b-a10b.json") -> dict[str, Any]:
    text = resources.files("probe.data").joinpath("models").joinpath(name).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def test_every_packaged_profile_dumps_as_its_file():
    folder = resources.files("probe.data").joinpath("models")
    files = sorted(e.name for e in folder.iterdir() if e.name.endswith(".json"))
    assert [p.slug + ".json" for p in load_profiles()] == files
    for prof, name in zip(load_profiles(), files, strict=True):
        assert prof.to_dict() == {**_raw(name), "origin": "catalog"}


def test_one_quant_list():
    assert get_args(Quant) == QUANTS
    assert {q for p in load_profiles() for q in p.quant_formats} <= set(QUANTS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": 0}, "hidden_size: expected a positive integer"),
        ({"hidden_size": "3072"}, "hidden_size"),
        ({"colour": "blue"}, "unknown fields ['colour']"),
        ({"quant": "int3"}, "unknown quant 'int3'"),
        ({"quant_formats": ["bf16", "int3"]}, "unknown quant 'int3'"),
        ({"quant": "mxfp4"}, "default quant mxfp4 not in quant_formats"),
        ({"aliases": ["122b", 7]}, "aliases: expected a list of text"),
        ({"slug": None}, "slug: expected text"),
    ],
)
def test_malformed_profile_is_rejected(change, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        profile_from_dict({**_raw(), **change})


def test_malformed_moe_shape_is_rejected():
    raw = _raw()
    with pytest.raises(ValueError, match="top_k 300 > experts 256"):
        profile_from_dict({**raw, "moe": {**raw["moe"], "top_k": 300}})
    with pytest.raises(ValueError, match="activation"):
        profile_from_dict({**raw, "moe": {**raw["moe"], "activation": "swish"}})
    with pytest.raises(ValueError, match="missing experts"):
        profile_from_dict({**raw, "moe": {"top_k": 8, "intermediate": 1024}})
    with pytest.raises(ValueError, match="unknown fields"):
        profile_from_dict({**raw, "moe": {**raw["moe"], "gate": 1}})


def test_missing_required_field():
    raw = _raw()
    del raw["num_attention_heads"]
    with pytest.raises(ValueError, match="missing num_attention_heads"):
        profile_from_dict(raw)
