"""probe/data/backends.json: one record per backend, validated at load; every backend a published vLLM
version lists has a record or a reason it is not covered."""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path

import pytest

from probe.catalog.backends import catalog, parse
from probe.catalog.scan_rules import Gate, GateClause, cc_to_int
from probe.errors import DataFileError

ROOT = Path(__file__).resolve().parents[2]


def _raw() -> dict:
    return json.loads((ROOT / "probe" / "data" / "backends.json").read_text(encoding="utf-8"))


def test_packaged_catalog_loads():
    cat = catalog()
    ids = {b.id for b in cat.backends}
    needed = """moe.marlin moe.cutlass moe.flashinfer_cutlass moe.flashinfer_trtllm moe.flashinfer_cutedsl
        moe.triton moe.deep_gemm attention.flash_attn.fa2 attention.flash_attn.fa3 attention.flash_attn.fa4
        attention.flashinfer attention.triton_attn attention.flex_attention attention.flashmla
        attention.cutlass_mla attention.flashinfer_mla attention.triton_mla attention.flash_attn_mla"""
    for rid in needed.split():
        assert rid in ids
    assert "nvfp4" not in cat.find("moe", "triton").vllm.quants  # rejected for NVFP4 (field report + oracle)
    assert cat.find("moe", "flashinfer_cutlass").vllm.min_sm == {"nvfp4": 100}
    assert cat.find("attention", "FLASH_ATTN", 4).vllm.fa_flag_since == "0.18.1"


def _published_backends() -> set[tuple[str, str]]:
    """(kind, name) of every MoE / attention backend the published prediction sets asked a vLLM version
    about (vLLM 0.26.0 … 0.33.0, on the GPUs whose lists are the longest: each version's own list) and every
    measured matrix ran."""
    found: set[tuple[str, str]] = set()
    sets = (ROOT / "matrices" / "predicted").glob("*/sm_*.json.gz")
    for path in sorted(p for p in sets if p.name in ("sm_90.json.gz", "sm_100.json.gz", "sm_120.json.gz")):
        cells = json.loads(gzip.decompress(path.read_bytes()))["cells"]
        found |= {(c["kind"], c["backend"]) for c in cells if c["kind"] in ("moe", "attention")}
    for path in sorted((ROOT / "matrices" / "measured").glob("*.json")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        found |= {(c["kind"], c["params"]["backend"]) for c in cells if c["kind"] in ("moe", "attention")}
    return {(k, n) for k, n in found if n != "auto"}


def test_every_published_backend_has_a_record_or_a_reason():
    published = _published_backends()
    assert len(published) > 40  # the sets were read (7 versions: 25 MoE values, 18 attention members)
    cat = catalog()
    missing = sorted(f"{k} {n}" for k, n in published if cat.find(k, n) is None and cat.gap(k, n) is None)
    assert missing == [], "add a record (or a not_covered entry with its reason) to probe/data/backends.json"


def test_every_record_says_what_it_runs_on_and_how_it_is_scanned():
    for b in catalog().backends:
        assert b.runtime is None or isinstance(b.runtime, tuple)
        assert (b.scan is None) != (b.scan_gap is None), b.id
        for v in b.scan.variants if b.scan else ():
            for r in v.requirements:
                assert r.files or r.check not in ("code", "present")
                assert all(rx.pattern for rx in r.kernel_res)


@pytest.mark.parametrize(
    ("clauses", "allowed", "refused"),
    [
        ([{"majors": (9,)}], [90], [80, 100, 110, 120]),
        ([{"exact": "9.0"}, {"majors": (10,)}, {"majors": (12,)}], [90, 100, 103, 120, 121], [89, 110, 80]),
        ([{"min": "8.0", "max": "12.1"}], [80, 121, 110], [75, 130]),
        ([{"min": "9.0", "max": "11.9"}], [90, 100, 110], [89, 120]),
        ([{"min": "7.5"}], [75, 120], [70]),
    ],
)
def test_gate_rules(clauses, allowed, refused):
    gate = Gate(any_of=tuple(GateClause(**c) for c in clauses), text="t", source="s")
    assert all(gate.allows(sm) for sm in allowed)
    assert not any(gate.allows(sm) for sm in refused)


def test_cc_to_int():
    assert cc_to_int("12.1") == 121
    with pytest.raises(ValueError):
        cc_to_int("sm_90")


def _mutated(fn) -> dict:
    raw = copy.deepcopy(_raw())
    fn(raw)
    return raw


def _req(d: dict, i: int = 0) -> dict:
    return d["backends"][i]["scan"]["variants"][0]["requirements"][0]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["backends"].append(copy.deepcopy(d["backends"][0])), "duplicate backend ids"),
        (lambda d: _req(d).update(kernels="Marlin<("), "bad kernel regex"),
        (lambda d: _req(d)["files"][0].update(glob="/abs/vllm/_moe_C.abi3.so"), "globs are relative"),
        (lambda d: _req(d).update(files=[]), "needs files"),
        (lambda d: d["backends"][0]["scan"]["gate"]["any_of"].append({}), "at least one of"),
        (
            lambda d: d["backends"][0]["scan"]["gate"]["any_of"][0].update(min="sm_75"),
            "not a compute capability",
        ),
        (lambda d: d["backends"][0].update(kind="attention"), "must be 'attention.<name>'"),
        (lambda d: d["backends"][0].update(unknown_field=1), "unknown fields"),
        (lambda d: _req(d, 5).pop("toolchain"), "needs a toolchain"),
        (lambda d: d.update(schema_version=1), "schema_version"),
        (lambda d: d["backends"][0]["vllm"].update(since="soon"), "is not X.Y.Z"),
        (lambda d: d["backends"][0]["vllm"].update(quants=["fp9"]), "'fp9' is not one of"),
        (lambda d: d["backends"][0].update(runtime=["flashinfer_typo"]), "not defined in components.groups"),
        (lambda d: d["backends"][0].update(scan=None), "a scan rule or a scan_gap"),
        (
            lambda d: d["not_covered"].append({"kind": "moe", "name": "marlin", "reason": "x"}),
            "has a record and",
        ),
        (lambda d: d["not_covered"].append({"kind": "moe", "match": "(", "reason": "x"}), "bad regex"),
        (lambda d: d["vllm"]["auto_priority"]["moe"]["fp8"].append("nosuch"), "no record for"),
        (lambda d: d["backends"][0]["vllm"]["env_era"]["nvfp4"].update(FOO="1"), "VLLM_"),
    ],
)
def test_validator_rejects(mutate, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse(_mutated(mutate))


def test_unmutated_copy_validates():
    assert len(parse(_raw()).backends) == len(catalog().backends)


def test_a_broken_packaged_file_is_a_data_file_error(monkeypatch):
    from probe.catalog import backends, datafiles

    monkeypatch.setattr(datafiles, "read_json", lambda name: {"schema_version": 2})
    backends.catalog.cache_clear()
    try:
        with pytest.raises(DataFileError, match=r"backends\.json is invalid"):
            backends.catalog()
    finally:
        backends.catalog.cache_clear()


def test_scanned_by_name_and_kind():
    cat = catalog()
    assert [b.id for b in cat.scanned(["marlin"])] == ["moe.marlin"]
    assert {b.id for b in cat.scanned(["FLASH_ATTN"])} == {
        "attention.flash_attn.fa2",
        "attention.flash_attn.fa3",
        "attention.flash_attn.fa4",
    }
    assert all(b.kind == "moe" and b.scan for b in cat.scanned(["moe"]))
    assert cat.find("moe", "humming").scan is None  # no rule yet: scan_gap says why


def test_components_and_imports():
    cat = catalog()
    assert cat.components_of("attention", "FLASH_ATTN", 4) == (
        "cuda_libs",
        "cute_dsl",
        "flash_attn",
        "torch",
        "vllm",
    )
    assert cat.components_of("attention", "FLASH_ATTN", 2) == ("cuda_libs", "flash_attn", "torch", "vllm")
    assert cat.components_of("moe", "auto") == tuple(sorted(cat.components.groups))  # unknown: everything
    assert cat.components_of("engine", "x") == tuple(sorted(cat.components.groups))
    assert [i["module"] for i in cat.imports_of("moe", "flashinfer_cutedsl")] == ["cutlass", "flashinfer"]
    assert cat.imports_of("moe", "marlin") == [] and cat.imports_of("moe", "aiter") == []


def test_one_reader_of_the_packaged_data():
    """One path per concept: only probe/catalog/datafiles.py opens probe/data."""
    root = ROOT / "probe"
    readers = sorted(
        str(p.relative_to(root.parent))
        for p in root.rglob("*.py")
        if re.search(r'resources\.files\(|__file__.*/ "data"|probe\.data\b.*(open|read_text)', p.read_text())
    )
    assert readers == ["probe/catalog/datafiles.py"]
