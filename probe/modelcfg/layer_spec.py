"""A model profile's per-layer reading in the shape vLLM's own reading (the oracle child's) takes: the
distinct attention kinds, the layers without a KV cache, the routed-experts layers with their router
inputs; and where two such readings differ (probe's reading of a ``config.json`` checked against vLLM's)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from probe.catalog.layer_kinds import NON_GATED, VLLM_MOE_ACTIVATION, AttentionKind, routing_defaults
from probe.catalog.profile import ModelProfile


def routing_of(profile: ModelProfile) -> dict[str, Any]:
    """The router inputs: read from the config when the profile was, else by model_type."""
    if profile.moe is not None and profile.moe.routing is not None:
        return asdict(profile.moe.routing)
    return routing_defaults(profile.text_model_type, profile.model_type)


def spec_of_kinds(kinds: tuple[AttentionKind, ...]) -> list[dict[str, Any]]:
    return sorted((k.spec() for k in kinds), key=lambda k: (-k["layers"], k["head_size"], k["num_heads"]))


def moe_spec(profile: ModelProfile) -> list[dict[str, Any]]:
    """The distinct routed-experts layers: one kind, plus the hash-routed first layers when there are."""
    moe = profile.moe
    if moe is None:
        return []
    act = VLLM_MOE_ACTIVATION.get(moe.activation, moe.activation)
    routing = routing_of(profile)
    kind: dict[str, Any] = {
        "experts": moe.experts,
        "top_k": moe.top_k,
        "hidden": moe.latent_size or profile.hidden_size,
        "intermediate": moe.intermediate,
        "activation": act,
        "gated": act not in NON_GATED,
        "routing": routing,
        "scheme": moe.scheme or profile.quant,
        "layers": moe.moe_layers,
    }
    if not moe.hash_layers:
        return [kind]
    hashed = {**kind, "routing": {**routing, "has_e_score_bias": False}, "layers": moe.hash_layers}
    return [{**kind, "layers": (moe.moe_layers or 0) - moe.hash_layers}, hashed]


def layer_spec(profile: ModelProfile) -> dict[str, Any]:
    """The profile's per-layer reading in the oracle child's JSON shape (see the module docstring)."""
    return {
        "attention": spec_of_kinds(profile.layer_kinds()),
        "mixers": dict(sorted(profile.mixers())),
        "moe": moe_spec(profile),
    }


def _canonical(items: list[dict[str, Any]], drop: tuple[str, ...] = ()) -> list[str]:
    import json

    return sorted(json.dumps({k: v for k, v in i.items() if k not in drop}, sort_keys=True) for i in items)


def spec_differences(probe_spec: dict[str, Any], vllm_spec: dict[str, Any]) -> list[str]:
    """Where two per-layer readings (:func:`layer_spec` vs the oracle child's) differ; [] when they agree.

    MoE kinds are compared without vLLM's ``routing_method`` (the RoutingMethodType it derives from
    the routing inputs, which both readings carry)."""
    out = []
    if _canonical(probe_spec["attention"]) != _canonical(vllm_spec["attention"]):
        out.append(f"attention: probe {probe_spec['attention']} | vLLM {vllm_spec['attention']}")
    if dict(probe_spec["mixers"]) != dict(vllm_spec["mixers"]):
        out.append(f"mixers: probe {probe_spec['mixers']} | vLLM {vllm_spec['mixers']}")
    drop = ("routing_method",)
    if _canonical(probe_spec["moe"], drop) != _canonical(vllm_spec["moe"], drop):
        out.append(f"moe: probe {probe_spec['moe']} | vLLM {vllm_spec['moe']}")
    return out
