"""The value order of a budgeted run: the import cell, the requested models' own shapes, the recommended
pair and its runner-up, vLLM's defaults, then the sweep."""

from __future__ import annotations

from probe.probes.planner import PlanOptions, build_plan
from probe.run.order import ModelFocus, Preferred, Priorities, by_value, focus_of, tier_label


def test_the_plan_of_one_model_in_order_of_value():
    specs = build_plan(PlanOptions(models=("122b",), experts=(8, 256), tp=(1,), fa_versions=(2, 3)))
    best = Preferred("qwen3.5-122b-a10b", "auto", "FLASH_ATTN", 3, 0)
    runner_up = Preferred("qwen3.5-122b-a10b", "marlin", "TRITON_ATTN", None, 1)
    prio = Priorities(focus_of(["122b"]), (best, runner_up))
    ordered, tiers = by_value(specs, prio)
    ids = [s.id for s in ordered]
    assert ids[0] == "import"
    assert sorted(tiers.values()) == [tiers[i] for i in ids]  # sorted by tier, stable within
    first_sweep = next(i for i, s in enumerate(ordered) if s.params.get("matrix") == "kernel")
    model = [s for s in ordered[:first_sweep] if s.kind.value != "import"]
    assert model and all(s.params.get("matrix") != "kernel" for s in model)
    top = [s.id for s in ordered[1:4]]
    fa3 = "attention/FLASH_ATTN/fa3/h=32/kv=2/d=256"
    assert fa3 in top  # the recommended attention backend, its FA version
    assert tier_label(tiers[fa3]) == "model shape, own quant, recommended"
    assert tier_label(tiers["attention/FLASH_ATTN/fa2/h=32/kv=2/d=256"]) == "model shape, own quant, other"
    marlin = "moe/marlin/nvfp4/E=256/H=3072/I=1024/k=8/tp=1"
    assert tier_label(tiers[marlin]) == "model shape, own quant, runner-up"
    assert tier_label(tiers["moe/marlin/bf16/E=256/H=3072/I=1024/k=8/tp=1"]) == "model shape, runner-up"
    assert tier_label(tiers["moe/marlin/nvfp4/E=8/H=3072/I=1024/k=8/tp=1"]) == "sweep, runner-up"
    auto = "engine/qwen3.5-122b-a10b/nvfp4/auto+auto"
    assert tier_label(tiers[auto]) == "model shape, own quant, vLLM default (auto)"
    assert ids.index(marlin) < ids.index(auto) < ids.index("moe/triton/nvfp4/E=256/H=3072/I=1024/k=8/tp=1")


def test_without_a_recommendation_the_shapes_still_lead():
    specs = build_plan(PlanOptions(models=("122b", "35b"), experts=(8,), tp=(1,), kinds=("moe",)))
    ordered, tiers = by_value(specs, Priorities(focus_of(["35b"])))
    first = ordered[0]
    assert first.params["model"] == "qwen3.6-35b-a3b" and first.params["quant"] == "nvfp4"
    labels = [tier_label(tiers[s.id]) for s in ordered]
    assert labels[0] == "model shape, own quant, other" and labels[-1].startswith("sweep")
    rank = ["model shape, own quant, other", "model shape, other", "sweep, other"]
    assert labels == sorted(labels, key=rank.index)
    no_focus, _ = by_value(specs, Priorities((ModelFocus("nothing", "bf16"),)))
    assert [s.id for s in no_focus] == [s.id for s in specs]  # nothing to prefer: the plan's order
