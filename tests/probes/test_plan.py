"""Plan building (parent side, no torch / vLLM): flags, enumeration, cell ids and params."""

from __future__ import annotations

import argparse
import importlib

import pytest

from probe.cli import plan_args
from probe.errors import OptionError, UsageError
from probe.probes import planner as plan_mod
from probe.probes import vllm_compat

from .conftest import FAKE


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    plan_args.add_plan_arguments(p)
    return p.parse_args(list(argv))


def _plan(*argv: str) -> list:
    return plan_args.build_plan_from_args(_args(*argv))


@pytest.fixture
def vllm026(monkeypatch):
    info = vllm_compat.static_info([str(FAKE / "v026")])
    monkeypatch.setattr(vllm_compat, "static_info", lambda search_path=None: info)
    return info


def test_default_plan_covers_every_accepted_backend(vllm026):
    specs = _plan()
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


def test_attention_layer_cells_are_warm_and_engine_cells_isolated(vllm026):
    specs = _plan("--kinds", "attention,engine")
    attn = [s for s in specs if s.kind == "attention"]
    eng = [s for s in specs if s.kind == "engine"]
    assert attn and eng and all(s.isolate for s in eng)
    # the default models have no MLA: every attention cell drives the layer in a warm worker per backend
    assert all(s.target == "probe.probes.attention_layer:run" and not s.isolate for s in attn)
    assert all(s.env == {"PROBE_ATTN_BACKEND": s.params["backend"]} for s in attn)
    # an engine takes gpu_memory_utilization of the device: under -j N it runs alone
    assert all(s.params["exclusive"] is True for s in eng)
    assert not any(s.params.get("exclusive") for s in attn + _plan("--kinds", "moe"))
    assert all(s.env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" for s in eng)
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


def test_sinks_and_mla_layouts(vllm026):
    specs = _plan("--kinds", "attention", "--models", "120b,deepseek-v3")
    layer = [s for s in specs if s.target == "probe.probes.attention_layer:run"]
    assert layer and all(s.params["sinks"] is True and s.id.endswith("/sinks") for s in layer)  # gpt-oss
    mla = [s for s in specs if s not in layer]
    assert mla and all(s.params["mla"] and s.target == "probe.probes.engine:run_attention" for s in mla)
    assert all(s.isolate for s in mla)
    assert "sinks" not in _plan("--kinds", "attention", "--models", "nano")[0].params


def test_mla_model_gets_mla_backends(vllm026):
    specs = _plan("--kinds", "attention", "--models", "deepseek-v3")
    names = {s.params["backend"] for s in specs}
    assert "FLASHMLA" in names and "TRITON_MLA" in names and "FLASH_ATTN" not in names
    assert all(s.params["mla"] for s in specs)


def test_pairs_flag(vllm026):
    specs = _plan(
        *(
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
        _plan(*argv)


def test_without_vllm_plans_static_superset(monkeypatch, tmp_path):
    empty = vllm_compat.static_info([str(tmp_path)])  # nothing there: "vLLM not installed"
    monkeypatch.setattr(vllm_compat, "static_info", lambda search_path=None: empty)
    specs = _plan("--kinds", "moe", "--experts", "8", "--models", "35b", "--tp", "1")
    assert {s.params["backend"] for s in specs} == set(vllm_compat.known_moe_backends())


def test_targets_resolve_without_torch(vllm026):
    for spec in _plan("--experts", "8", "--tp", "1"):
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
    ids = {s.id for s in plan_args.build_plan_from_args(args)}
    assert "moe/marlin/nvfp4/E=256/H=3072/I=512/k=8/tp=2" in ids


def test_gdn_models_get_a_triton_gdn_prefill_variant(vllm026):
    specs = _plan("--kinds", "engine", "--models", "122b,nano")
    gdn = [s for s in specs if s.params.get("engine_args")]
    assert {s.params["model"] for s in gdn} == {"qwen3.5-122b-a10b"}  # Nemotron's Mamba2 is no GDN
    assert len(gdn) == 3 and all(s.params["engine_args"] == {"gdn_prefill_backend": "triton"} for s in gdn)
    assert all(s.id.endswith("/gdn_prefill_backend=triton") for s in gdn)
    assert len({s.id for s in specs}) == len(specs) == 9


def test_user_engine_args_apply_to_every_engine_cell(vllm026):
    specs = _plan(
        *("--kinds", "engine", "--models", "122b", "--engine-args", "gdn-prefill-backend=flashinfer")
    )
    # the user's own GDN choice replaces the automatic variant
    assert [s.params["engine_args"] for s in specs] == [{"gdn_prefill_backend": "flashinfer"}] * 3


@pytest.mark.parametrize("bad", ["gdn_prefill_backend", "=triton", "two words=x", "k="])
def test_bad_engine_args_are_usage_errors(bad):
    from probe.errors import UsageError

    with pytest.raises(UsageError, match="KEY=VALUE"):
        plan_args.parse_engine_args(bad)


def test_core_errors_name_options_and_the_cli_words_them_as_flags(vllm026):
    # the planner speaks of options, not flags ...
    with pytest.raises(OptionError) as exc:
        plan_mod.build_plan(plan_mod.PlanOptions(kinds=("moe", "bogus")))
    assert exc.value.option == "kinds" and "--" not in str(exc.value)
    with pytest.raises(OptionError, match="fa_versions"):
        plan_mod.build_plan(plan_mod.PlanOptions(fa_versions=(5,)))
    # ... and the CLI words them as its flags, with the same help as before
    with pytest.raises(UsageError, match=r"^--kinds: unknown bogus; known: import, moe, attention, engine"):
        _plan("--kinds", "moe,bogus")
    with pytest.raises(UsageError, match=r"^--moe-backends: vLLM .* does not accept not_a_backend") as e2:
        _plan("--moe-backends", "not_a_backend")
    assert "accepted:" in str(e2.value)


def test_plan_options_are_typed_and_frozen():
    opts = plan_args.plan_options(
        _args("--pairs", "marlin:flash_attn:3", "--engine-args", "a=1", "--tp", "2")
    )
    assert opts.pairs == (plan_mod.EnginePair("marlin", "FLASH_ATTN", 3),)
    assert opts.engine_args == {"a": "1"} and opts.tp == (2,) and opts.moe_backends is None
    with pytest.raises(AttributeError):
        opts.tp = (1,)  # type: ignore[misc]


def test_specs_round_trip_through_typed_params(vllm026):
    from probe.cell_params import AttentionParams, CellKind, EngineParams, MoeParams

    typed = {CellKind.MOE: MoeParams, CellKind.ATTENTION: AttentionParams, CellKind.ENGINE: EngineParams}
    specs = _plan("--experts", "8", "--tp", "1", "--models", "122b")
    assert {s.kind for s in specs} == set(CellKind) - {CellKind.FIXTURE}
    for s in specs:
        if s.kind in typed:
            p = typed[s.kind].from_wire(s.params)
            assert p.to_wire(s.budget) == s.params  # same keys, same order
            assert list(p.to_wire(s.budget)) == list(s.params)
        assert s.budget.timeout_s == s.timeout_s
        assert s.budget.exclusive is (s.kind is CellKind.ENGINE)


def test_published_plan_file_loads_and_its_params_parse():
    import gzip
    import json
    from pathlib import Path

    from probe.cell_params import AttentionParams, CellKind, EngineParams, MoeParams
    from probe.cells import CellSpec
    from probe.sandbox.journal import plan_hash

    path = Path(__file__).parents[2] / "matrices/measured/nvidia-h200-sm90-vllm-0.26.0.plan.json.gz"
    raw = json.loads(gzip.decompress(path.read_bytes()))
    specs = [CellSpec.model_validate(c) for c in raw]
    assert len(specs) == 1300
    assert [s.model_dump(mode="json") for s in specs] == raw  # loads and dumps identically
    typed = {CellKind.MOE: MoeParams, CellKind.ATTENTION: AttentionParams, CellKind.ENGINE: EngineParams}
    for s in specs:
        if s.kind in typed:
            assert typed[s.kind].from_wire(s.params).to_wire(s.budget) == s.params
    assert len(plan_hash(specs)) == 16
