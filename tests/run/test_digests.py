"""Package digests from ``*.dist-info/RECORD``: what they see, what they cannot, the cache."""

from __future__ import annotations

import json

from probe.run import digests
from probe.run.reuse import components_of, deps_table
from tests.run.conftest import write_dist


def _comps() -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in deps_table().groups.items()}


def test_a_component_digest_changes_with_its_record_only(site, tmp_path):
    cache = digests.DigestCache(tmp_path / "d.json")
    before = digests.component_digests(digests.installed([site]), _comps(), cache)
    assert before["flash_attn"] == before["deep_gemm"] == digests.ABSENT
    assert all(len(before[c]) == 16 for c in ("vllm", "torch", "cuda_libs", "flashinfer", "triton"))
    write_dist(site, "flashinfer-python", "0.6.14", {"flashinfer/__init__.py": "v = 2\n"})  # rebuilt wheel
    after = digests.component_digests(digests.installed([site]), _comps(), cache)
    assert {c for c in before if before[c] != after[c]} == {"flashinfer"}


def test_an_editable_install_or_an_egg_cannot_be_digested(site, tmp_path):
    editable = json.dumps({"url": "file:///src/triton", "dir_info": {"editable": True}})
    write_dist(site, "triton", "3.6.0", meta={"direct_url.json": editable})
    (site / "deep_gemm-1.0.egg-info").mkdir()
    got = digests.component_digests(digests.installed([site]), _comps(), digests.DigestCache(None))
    assert got["triton"].startswith("unknown: triton 3.6.0 is an editable install")
    assert got["deep_gemm"].startswith("unknown: deep-gemm 1.0 is no RECORD")


def test_the_first_site_folder_wins_and_the_cache_is_used(site, tmp_path):
    other = tmp_path / "user-site"
    write_dist(other, "vllm", "0.33.0")
    found = digests.installed([other, site])
    assert found["vllm"].version == "0.33.0" and found["torch"].version == "2.11.0"
    path = tmp_path / "d.json"
    cold = digests.DigestCache(path)
    digests.component_digests(found, _comps(), cold)
    cold.save()
    warm = digests.DigestCache(path)
    assert digests.component_digests(found, _comps(), warm) == digests.component_digests(
        found, _comps(), digests.DigestCache(None)
    )
    assert warm.misses == 0 and warm.hits >= 5
    assert digests.torch_cuda([site]) == "13.0"


def test_what_each_kind_of_cell_runs_on():
    always = {"vllm", "torch", "cuda_libs"}
    assert set(components_of("moe", {"backend": "marlin"})) == always
    assert set(components_of("moe", {"backend": "flashinfer_trtllm"})) == always | {"flashinfer"}
    assert set(components_of("moe", {"backend": "flashinfer_cutedsl"})) == always | {"flashinfer", "cute_dsl"}
    assert set(components_of("moe", {"backend": "triton"})) == always | {"triton"}
    assert set(components_of("moe", {"backend": "deep_gemm_mega_moe"})) == always | {"deep_gemm", "triton"}
    fa3 = {"backend": "FLASH_ATTN", "fa_version": 3}
    assert set(components_of("attention", fa3)) == always | {"flash_attn"}
    assert set(components_of("attention", {"backend": "FLASH_ATTN", "fa_version": 4})) == always | {
        "flash_attn",
        "cute_dsl",
    }
    assert set(components_of("attention", {"backend": "FLASHINFER_MLA"})) == always | {"flashinfer"}
    everything = set(deps_table().groups)
    assert set(components_of("engine", {"moe_backend": "marlin"})) == everything
    assert set(components_of("moe", {"backend": "a_backend_nobody_knows"})) == everything
