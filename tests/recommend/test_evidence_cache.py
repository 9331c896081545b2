"""The evidence cache (probe/recommend/evidence_cache.py): an answer from cached cells is the answer
from the files read again; a changed file, a corrupt entry or a folder others may write never serves
a stale or foreign answer; the folder stays bounded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from probe.catalog.models import load_profiles
from probe.recommend import evidence_cache
from probe.recommend.recommender import recommend
from probe.recommend.sources import file_evidence

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "matrices" / "measured" / "nvidia-h200-sm90-vllm-0.26.0.json"
PREDICTED = ROOT / "matrices" / "predicted" / "vllm-0.33.0" / "sm_120.json.gz"


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PROBE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PROBE_EVIDENCE_CACHE", raising=False)
    return tmp_path / "cache" / "evidence"


def _answers(gpu: str, matrices: list[Path]) -> dict[str, object]:
    return {
        p.name: recommend(p.name, gpu=gpu, matrices=matrices, vllm="0.26.0").to_dict()
        for p in load_profiles()[:6]
    }


@pytest.mark.parametrize("gpu", ["sm_90", "sm_120"])
def test_answers_from_the_cache_are_those_from_the_files(cache_home, monkeypatch, gpu):
    matrices = [ROOT / "matrices"]
    monkeypatch.setenv("PROBE_EVIDENCE_CACHE", "0")
    fresh = _answers(gpu, matrices)
    assert not cache_home.exists()
    monkeypatch.delenv("PROBE_EVIDENCE_CACHE")
    cold = _answers(gpu, matrices)
    assert len(list(cache_home.glob("*.marshal"))) >= 2
    warm = _answers(gpu, matrices)
    assert fresh == cold == warm


def test_a_changed_file_is_read_again(cache_home, tmp_path):
    copy = tmp_path / "m.json"
    shutil.copy(H200, copy)
    before, _ = evidence_cache.cached(copy, 90, file_evidence)
    doc = json.loads(copy.read_text())
    doc["cells"] = doc["cells"][:10]
    copy.write_text(json.dumps(doc, indent=1))
    after, _ = evidence_cache.cached(copy, 90, file_evidence)
    assert len(before) == 1296 and len(after) == 10
    assert after == file_evidence(copy, 90)[0]


def test_a_corrupt_entry_is_a_miss_and_is_replaced(cache_home):
    want = file_evidence(PREDICTED, 120)
    assert evidence_cache.cached(PREDICTED, 120, file_evidence) == want
    (entry,) = cache_home.glob("*.marshal")
    entry.write_bytes(b"\x00not marshal")
    assert evidence_cache.cached(PREDICTED, 120, file_evidence) == want
    assert entry.read_bytes() != b"\x00not marshal"


def test_a_folder_others_may_write_is_not_used(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("PROBE_CACHE_DIR", str(shared))
    assert evidence_cache.cached(PREDICTED, 120, file_evidence) == file_evidence(PREDICTED, 120)
    assert list(shared.iterdir()) == []


def test_the_folder_keeps_the_newest_entries(cache_home, tmp_path, monkeypatch):
    monkeypatch.setattr(evidence_cache, "MAX_ENTRIES", 2)
    empty = json.dumps({"schema_version": 1, "kind": "matrix", "provenance": {}, "cells": []})
    for i in range(4):
        f = tmp_path / f"m{i}.json"
        f.write_text(empty + " " * i)
        evidence_cache.cached(f, 90, file_evidence)
    assert len(list(cache_home.glob("*.marshal"))) == 2
