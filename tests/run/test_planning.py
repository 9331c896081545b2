"""What the plan says before a run: whether FlashInfer's CUTLASS MoE module is built already (a cold build
is ~40 min), what a cell compiles by its backend's nature."""

from __future__ import annotations

from probe.run.planning import compiles_itself, flashinfer_moe_built
from tests.run.conftest import cell


def test_a_built_flashinfer_moe_module_is_found(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "home"))
    site = tmp_path / "site-packages"
    site.mkdir()
    assert flashinfer_moe_built([str(site)], 90) is None
    jit = tmp_path / "home" / ".cache" / "flashinfer" / "0.6.14" / "90" / "cached_ops" / "fused_moe_90"
    jit.mkdir(parents=True)
    (jit / "fused_moe_90.so").write_bytes(b"")
    assert flashinfer_moe_built([str(site)], 90) == str(jit)
    assert flashinfer_moe_built([str(site)], 100) is None  # another GPU needs fused_moe_100
    aot = site / "flashinfer" / "data" / "aot" / "fused_moe_100"
    aot.mkdir(parents=True)
    (aot / "fused_moe_100.so").write_bytes(b"")
    assert flashinfer_moe_built([str(site)], 100) == str(aot)
    assert flashinfer_moe_built([str(site)], None) is None


def test_what_a_cell_compiles_by_its_backend():
    assert compiles_itself(cell("a", "moe", backend="triton")) == "Triton kernels"
    assert compiles_itself(cell("b", "moe", backend="flashinfer_cutlass")) == "JIT module"
    assert compiles_itself(cell("c", "attention", backend="FLASH_ATTN", fa_version=4)) == "CuTe DSL kernels"
    assert compiles_itself(cell("c", "attention", backend="FLASH_ATTN", fa_version=3)) is None
    assert compiles_itself(cell("d", "moe", backend="marlin")) is None
    assert compiles_itself(cell("e", "engine", moe_backend="triton")) is None
