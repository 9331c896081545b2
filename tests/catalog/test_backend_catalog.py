"""probe/data/backends.json validates, and the validator rejects broken entries."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest
from pydantic import ValidationError

from probe.catalog.backends import BackendCatalog, Gate, GateClause, backend_catalog, cc_to_int


def _raw() -> dict:
    return json.loads(resources.files("probe.data").joinpath("backends.json").read_text())


def test_packaged_catalog_loads():
    cat = backend_catalog()
    ids = {b.id for b in cat.backends}
    # the MoE / attention backends probe was built to answer for
    for needed in (
        "moe.marlin",
        "moe.cutlass",
        "moe.flashinfer_cutlass",
        "moe.flashinfer_trtllm",
        "moe.flashinfer_cutedsl",
        "moe.triton",
        "moe.deep_gemm",
        "attention.flash_attn.fa2",
        "attention.flash_attn.fa3",
        "attention.flash_attn.fa4",
        "attention.flashinfer",
        "attention.triton_attn",
        "attention.flex_attention",
        "attention.flashmla",
        "attention.cutlass_mla",
        "attention.flashinfer_mla",
        "attention.triton_mla",
        "attention.flash_attn_mla",
    ):
        assert needed in ids
    names = {b.name for b in cat.backends if b.kind == "moe"}
    assert {"marlin", "cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "triton"} <= names


def test_every_compiled_requirement_names_files_and_kernels_compile():
    for b in backend_catalog().backends:
        for v in b.variants:
            for r in v.requirements:
                if r.check == "code":
                    assert r.files
                for rx in r.kernel_res:
                    assert rx.pattern


@pytest.mark.parametrize(
    ("clauses", "allowed", "refused"),
    [
        ([{"majors": [9]}], [90], [80, 100, 110, 120]),
        ([{"exact": "9.0"}, {"majors": [10]}, {"majors": [12]}], [90, 100, 103, 120, 121], [89, 110, 80]),
        ([{"min": "8.0", "max": "12.1"}], [80, 121, 110], [75, 130]),
        ([{"min": "9.0", "max": "11.9"}], [90, 100, 110], [89, 120]),
        ([{"min": "7.5"}], [75, 120], [70]),
    ],
)
def test_gate_rules(clauses, allowed, refused):
    gate = Gate(any_of=[GateClause(**c) for c in clauses], text="t", source="s")
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


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda d: d["backends"].append(copy.deepcopy(d["backends"][0])), id="duplicate-id"),
        pytest.param(
            lambda d: d["backends"][0]["variants"][0]["requirements"][0].update(kernels="Marlin<("),
            id="bad-regex",
        ),
        pytest.param(
            lambda d: d["backends"][0]["variants"][0]["requirements"][0]["files"][0].update(
                glob="/abs/vllm/_moe_C.abi3.so"
            ),
            id="absolute-glob",
        ),
        pytest.param(
            lambda d: d["backends"][0]["variants"][0]["requirements"][0].update(files=[]),
            id="code-without-files",
        ),
        pytest.param(lambda d: d["backends"][0]["gate"]["any_of"].append({}), id="empty-gate-clause"),
        pytest.param(lambda d: d["backends"][0]["gate"]["any_of"][0].update(min="sm_75"), id="bad-cc"),
        pytest.param(lambda d: d["backends"][0].update(kind="attention"), id="kind-vs-id"),
        pytest.param(lambda d: d["backends"][0].update(unknown_field=1), id="extra-field"),
        pytest.param(
            lambda d: d["backends"][5]["variants"][0]["requirements"][0].pop("toolchain"),
            id="pure-without-toolchain",
        ),
        pytest.param(lambda d: d.update(schema_version=2), id="schema-version"),
    ],
)
def test_validator_rejects(mutate):
    with pytest.raises(ValidationError):
        BackendCatalog.model_validate(_mutated(mutate))


def test_unmutated_copy_validates():
    BackendCatalog.model_validate(_raw())


def test_select_by_name_and_kind():
    cat = backend_catalog()
    assert [b.id for b in cat.select(["marlin"])] == ["moe.marlin"]
    assert {b.id for b in cat.select(["FLASH_ATTN"])} == {
        "attention.flash_attn.fa2",
        "attention.flash_attn.fa3",
        "attention.flash_attn.fa4",
    }
    assert all(b.kind == "moe" for b in cat.select(["moe"]))


def test_one_reader_of_the_packaged_data():
    """One path per concept: only probe/catalog/datafiles.py opens probe/data."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "probe"
    readers = sorted(
        str(p.relative_to(root.parent))
        for p in root.rglob("*.py")
        if re.search(r'resources\.files\(|__file__.*/ "data"|probe\.data\b.*(open|read_text)', p.read_text())
    )
    assert readers == ["probe/catalog/datafiles.py"]
