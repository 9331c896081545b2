"""Plan building (parent side, no torch / vLLM): flags, enumeration, cell ids and params."""

from __future__ import annotations

import argparse
import importlib

import pytest

from probe.errors import UsageError
from probe.probes import plan as plan_mod
from probe.probes import vllm_compat

from .conftest import FAKE


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    plan_mod.add_plan_arguments(p)
    return p.parse_args(list(argv))


@pytest.fixture
def vllm026(monkeypatch):
    info = vllm_compat.static_info([str(FAKE / "v026")])
    monkeypatch.setattr(vllm_compat, "static_info", lambda search_path=None: info)
    return info


def test_default_plan_covers_every_accepted_backend(vllm026):
    specs = plan_mod.build_plan(_args())
    ids = [s.id for s in specs]
    assert len(ids) == len(set(ids))
    moe = [s for s in specs if s.kind == "moe"]
    kernel = [s for s in moe if s.params["matrix"] == "kernel"]
    # every accepted backend x 6 quants x 10 expert counts at the first model's shape (122b: H 3072, I 1024)
    assert len(kernel) == 15 * 6 * 10
    assert {s.params["backend"] for s in kernel} == set(vllm026.moe_backends)
    assert {s.params["experts"] for s in kernel} == {8, 16, 32, 64, 128, 256, 512, 60, 144, 160}
    assert {(s.params["hidden"], s.params["intermediate"]) for s in kernel} == {(3072, 1024)}
    assert all(s.target == "probe.probes.moe:run" and not s.isolate for s in moe)
    # per-model cells carry the model's real shape per TP shard
    nano = [s for s in moe if s.params["model"] == "nemotron-3-nano-30b-a3b"]
    assert {s.params["tp"] for s in nano} == {1, 2, 4}
    assert {s.params["intermediate"] for s in nano} == {1856, 928, 464}
    assert {s.params["experts"] for s in nano} == {128}
    assert all(s.params["mem_gib"] > 0 for s in moe)


def test_attention_and_engine_cells_are_isolated(vllm026):
    specs = plan_mod.build_plan(_args("--kinds", "attention,engine"))
    attn = [s for s in specs if s.kind == "attention"]
    eng = [s for s in specs if s.kind == "engine"]
    assert attn and eng and all(s.isolate for s in attn + eng)
    # an engine takes gpu_memory_utilization of the device: under -j N it runs alone
    assert all(s.params["exclusive"] is True for s in attn + eng)
    assert not any(s.params.get("exclusive") for s in plan_mod.build_plan(_args("--kinds", "moe")))
    assert all(s.env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" for s in attn + eng)
    fa = sorted(
        s.params["fa_version"]
        for s in attn
        if s.params["backend"] == "FLASH_ATTN" and s.params["head_dim"] == 128
    )
    assert fa == [2, 3, 4]
    assert {s.params["backend"] for s in attn} == {
        "FLASH_ATTN",
        "TRITON_ATTN",
        "FLASHINFER",
        "FLEX_ATTENTION",
    }
    # three distinct head layouts for 122b / 35b / nano
    assert len({(s.params["num_heads"], s.params["head_dim"]) for s in attn}) == 3
    assert {s.params["model"] for s in eng} == {
        "qwen3.5-122b-a10b",
        "qwen3.6-35b-a3b",
        "nemotron-3-nano-30b-a3b",
    }
    assert {(s.params["moe_backend"], s.params["attention_backend"]) for s in eng} == {
        ("auto", "auto"),
        ("marlin", "TRITON_ATTN"),
        ("auto", "FLASH_ATTN"),
    }


def test_mla_model_gets_mla_backends(vllm026):
    specs = plan_mod.build_plan(_args("--kinds", "attention", "--models", "deepseek-v3"))
    names = {s.params["backend"] for s in specs}
    assert "FLASHMLA" in names and "TRITON_MLA" in names and "FLASH_ATTN" not in names
    assert all(s.params["mla"] for s in specs)


def test_pairs_flag(vllm026):
    specs = plan_mod.build_plan(
        _args(
            "--kinds",
            "engine",
            "--models",
            "35b",
            "--pairs",
            "cutlass:FLASH_ATTN:3,marlin:triton_attn,auto:auto",
        )
    )
    got = {(s.params["moe_backend"], s.params["attention_backend"], s.params["fa_version"]) for s in specs}
    assert got == {("cutlass", "FLASH_ATTN", 3), ("marlin", "TRITON_ATTN", None), ("auto", "auto", None)}


@pytest.mark.parametrize(
    "argv",
    [
        ("--kinds", "moe,bogus"),
        ("--quants", "fp16"),
        ("--experts", "8,x"),
        ("--experts", "0"),
        ("--tp", ""),
        ("--fa-versions", "5"),
        ("--pairs", "marlin"),
        ("--pairs", "marlin:FLASH_ATTN:9"),
        ("--moe-backends", "not_a_backend"),
        ("--attention-backends", "NOPE"),
        ("--models", "no-such-model-xyz"),
    ],
)
def test_bad_flags_are_usage_errors(vllm026, argv):
    with pytest.raises(UsageError):
        plan_mod.build_plan(_args(*argv))


def test_without_vllm_plans_static_superset(monkeypatch, tmp_path):
    empty = vllm_compat.static_info([str(tmp_path)])  # nothing there: "vLLM not installed"
    monkeypatch.setattr(vllm_compat, "static_info", lambda search_path=None: empty)
    specs = plan_mod.build_plan(_args("--kinds", "moe", "--experts", "8", "--models", "35b", "--tp", "1"))
    assert {s.params["backend"] for s in specs} == set(vllm_compat.known_moe_backends())


def test_targets_resolve_without_torch(vllm026):
    for spec in plan_mod.build_plan(_args("--experts", "8", "--tp", "1")):
        mod, fn = spec.target.split(":")
        assert callable(getattr(importlib.import_module(mod), fn))


def test_probe_run_cli_registers_plan_flags(vllm026):
    from probe.cli import run as run_cli

    p = argparse.ArgumentParser()
    run_cli.configure_parser(p)
    args = p.parse_args(
        [
            "--kinds",
            "moe",
            "--moe-backends",
            "marlin,triton",
            "--quants",
            "nvfp4",
            "--experts",
            "256",
            "--models",
            "122b",
            "--tp",
            "2",
        ]
    )
    ids = {s.id for s in plan_mod.build_plan(args)}
    assert "moe/marlin/nvfp4/E=256/H=3072/I=512/k=8/tp=2" in ids


def test_gdn_models_get_a_triton_gdn_prefill_variant(vllm026):
    specs = plan_mod.build_plan(_args("--kinds", "engine", "--models", "122b,nano"))
    gdn = [s for s in specs if s.params.get("engine_args")]
    assert {s.params["model"] for s in gdn} == {"qwen3.5-122b-a10b"}  # Nemotron's Mamba2 is no GDN
    assert len(gdn) == 3 and all(s.params["engine_args"] == {"gdn_prefill_backend": "triton"} for s in gdn)
    assert all(s.id.endswith("/gdn_prefill_backend=triton") for s in gdn)
    assert len({s.id for s in specs}) == len(specs) == 9


def test_user_engine_args_apply_to_every_engine_cell(vllm026):
    specs = plan_mod.build_plan(
        _args("--kinds", "engine", "--models", "122b", "--engine-args", "gdn-prefill-backend=flashinfer")
    )
    # the user's own GDN choice replaces the automatic variant
    assert [s.params["engine_args"] for s in specs] == [{"gdn_prefill_backend": "flashinfer"}] * 3


@pytest.mark.parametrize("bad", ["gdn_prefill_backend", "=triton", "two words=x", "k="])
def test_bad_engine_args_are_usage_errors(bad):
    from probe.errors import UsageError

    with pytest.raises(UsageError, match="KEY=VALUE"):
        plan_mod.parse_engine_args(bad)
