"""The value order of a budgeted run: the import cell, what decides the requested model's answer (MoE at its
shape, attention at its layout, then the engine check), its other cells, then the sweep; within each, the
recommended pair, its runner-up, vLLM's defaults, the rest."""

from __future__ import annotations

from probe.probes.planner import PlanOptions, build_plan
from probe.run.order import WHERE, ModelFocus, Preferred, Priorities, by_value, focus_of, tier_label


def test_the_plan_of_one_model_in_order_of_value():
    specs = build_plan(PlanOptions(models=("122b",), experts=(8, 256), tp=(1, 2), fa_versions=(2, 3)))
    best = Preferred("qwen3.5-122b-a10b", "auto", "FLASH_ATTN", 3, 0)
    runner_up = Preferred("qwen3.5-122b-a10b", "marlin", "TRITON_ATTN", None, 1)
    prio = Priorities(focus_of(["122b"]), (best, runner_up))
    ordered, tiers = by_value(specs, prio)
    ids = [s.id for s in ordered]
    assert ids[0] == "import"
    assert sorted(tiers.values()) == [tiers[i] for i in ids]  # sorted by tier, stable within
    stages = [tier_label(tiers[i]).split(",")[0] for i in ids[1:]]
    assert stages == sorted(stages, key=lambda w: WHERE.index(w))
    # the answer's halves before any engine, every engine of the model before the sweep
    moe_tp1 = "moe/marlin/nvfp4/E=256/H=3072/I=1024/k=8/tp=1"
    assert tier_label(tiers[moe_tp1]) == "answer: MoE at the model's shape, runner-up"
    assert ids[1] == moe_tp1  # the runner-up's MoE backend leads its stage (no MoE backend is recommended)
    fa3 = "attention/FLASH_ATTN/fa3/h=32/kv=2/d=256"
    assert tier_label(tiers[fa3]) == "answer: attention at the model's layout, recommended"
    fa2 = "attention/FLASH_ATTN/fa2/h=32/kv=2/d=256"
    assert tier_label(tiers[fa2]) == "answer: attention at the model's layout, other"
    auto = "engine/qwen3.5-122b-a10b/nvfp4/auto+auto"
    assert tier_label(tiers[auto]) == "answer: engine check, vLLM default (auto)"
    assert ids.index(fa2) < ids.index(auto)
    tp2 = next(i for i in ids if i.startswith("moe/marlin/nvfp4/") and i.endswith("/tp=2"))
    assert tier_label(tiers[tp2]) == "model: other TP / quant / engines, runner-up"
    assert tier_label(tiers["moe/marlin/bf16/E=256/H=3072/I=1024/k=8/tp=1"]) == (
        "model: other TP / quant / engines, runner-up"
    )
    assert ids.index(auto) < ids.index(tp2)
    assert tier_label(tiers["moe/marlin/nvfp4/E=8/H=3072/I=1024/k=8/tp=1"]) == "sweep, runner-up"


def test_without_a_recommendation_the_shapes_still_lead():
    specs = build_plan(PlanOptions(models=("122b", "35b"), experts=(8,), tp=(1,), kinds=("moe",)))
    ordered, tiers = by_value(specs, Priorities(focus_of(["35b"])))
    first = ordered[0]
    assert first.params["model"] == "qwen3.6-35b-a3b" and first.params["quant"] == "nvfp4"
    labels = [tier_label(tiers[s.id]) for s in ordered]
    assert labels[0] == "answer: MoE at the model's shape, other" and labels[-1].startswith("sweep")
    rank = [
        "answer: MoE at the model's shape, other",
        "model: other TP / quant / engines, other",
        "sweep, other",
    ]
    assert labels == sorted(labels, key=rank.index)
    no_focus, _ = by_value(specs, Priorities((ModelFocus("nothing", "bf16"),)))
    assert [s.id for s in no_focus] == [s.id for s in specs]  # nothing to prefer: the plan's order
