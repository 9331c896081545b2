"""The routed experts of a Hugging Face config, as vLLM's model code builds its FusedMoE layers.

Expert count, top-k (``num_experts_per_tok`` / ``top_k_experts`` / …), the experts' GEMM width (the
LatentMoE ``moe_latent_size`` / ``routed_expert_hidden_size`` when there is one), the activation
vLLM hands FusedMoE, how many layers carry experts, and the router inputs of
``get_routing_method_type``: scoring function, renormalisation, expert groups (``n_group``), a score
correction bias (``topk_method: noaux_tc`` / ``use_routing_bias``). Model types whose vLLM code fixes
the router without saying so in the config take it from ``probe/data/oracle_routing.json``.
"""

from __future__ import annotations

from probe.catalog.layer_kinds import Routing, routing_defaults
from probe.catalog.profile import MoeShape
from probe.modelcfg.values import Cfg

_EXPERTS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
_TOP_K = ("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "top_k_experts", "moe_topk",
          "num_selected_experts")  # fmt: skip
# the config's activation name -> the one vLLM's FusedMoE gets (gated unless the profile says relu2)
_ACTIVATION = {"silu": "silu", "swiglu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh",
               "gelu": "gelu", "situ": "situ", "relu2": "relu2"}  # fmt: skip


def routing(cfg: Cfg, model_type: str, top_model_type: str) -> Routing:
    base = routing_defaults(model_type, top_model_type)
    scoring = cfg.opt_text("scoring_func", "moe_router_activation_func") or base["scoring_func"]
    renorm = cfg.raw("norm_topk_prob", "moe_renormalize")
    bias = (
        cfg.raw("topk_method") == "noaux_tc" or bool(cfg.raw("use_routing_bias")) or base["has_e_score_bias"]
    )
    return Routing(
        scoring_func=str(scoring),
        renormalize=bool(base["renormalize"] if renorm is None else renorm),
        num_expert_group=cfg.opt_int("n_group", "num_expert_group"),
        has_e_score_bias=bool(bias),
    )


def _moe_layers(cfg: Cfg, model_type: str, n: int) -> int:
    """How many decoder layers carry routed experts."""
    if isinstance(cfg.data.get("hybrid_override_pattern"), str):
        return cfg.data["hybrid_override_pattern"].count("E")
    if isinstance(cfg.data.get("layers_block_type"), list):
        return sum(1 for t in cfg.data["layers_block_type"] if t == "moe")
    if (freq := cfg.data.get("moe_layer_freq")) is not None and isinstance(freq, list):
        return sum(1 for f in cfg.opt_ints("moe_layer_freq") or [] if f)
    if (kinds := cfg.opt_texts("mlp_layer_types")) is not None:
        return sum(1 for k in kinds if k == "sparse")
    if model_type.startswith("llama4"):
        step = cfg.opt_int("interleave_moe_layer_step") or 1
        return sum(1 for i in range(n) if (i + 1) % step == 0)
    dense_first = cfg.opt_int("first_k_dense_replace", minimum=0) or 0
    only = set(cfg.opt_ints("mlp_only_layers") or [])
    step = cfg.opt_int("decoder_sparse_step") or 1
    return sum(1 for i in range(dense_first, n) if i not in only and (i + 1) % step == 0)


def _activation(cfg: Cfg, model_type: str) -> str:
    if model_type == "gpt_oss":
        return "swigluoai"
    if model_type == "nemotron_h":
        return "relu2"
    name = cfg.opt_text("mlp_hidden_act", "hidden_act", "hidden_activation") or "silu"
    if name.lower() not in _ACTIVATION:
        raise cfg.bad("hidden_act", f"names an activation probe does not know ({name!r})")
    return _ACTIVATION[name.lower()]


def read_moe(cfg: Cfg, model_type: str, top_model_type: str, n: int, hidden: int) -> MoeShape | None:
    """The routed experts, or None for a dense model (an expert count <= 0 is an error, not dense)."""
    experts = cfg.opt_int(*_EXPERTS)
    if experts is None:
        return None
    top_k = cfg.need_int(*_TOP_K)
    if top_k > experts:
        raise cfg.bad(
            cfg.key_of(*_TOP_K) or "num_experts_per_tok", f"({top_k}) exceeds the expert count {experts}"
        )
    inter = cfg.opt_int("moe_intermediate_size", "expert_intermediate_size") or cfg.need_int(
        "intermediate_size"
    )
    latent = cfg.opt_int("moe_latent_size", "routed_expert_hidden_size")
    shared_i = cfg.opt_int(
        "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", minimum=0
    )
    n_shared = cfg.opt_int("n_shared_experts", "num_shared_experts", minimum=0)
    n_shared = n_shared if n_shared is not None else (1 if shared_i else 0)
    return MoeShape(
        experts=experts,
        top_k=top_k,
        intermediate=inter,
        shared_experts=n_shared,
        shared_intermediate=shared_i or (inter * n_shared if n_shared else None),
        activation=_activation(cfg, model_type),  # type: ignore[arg-type]
        latent_size=latent if latent and latent != hidden else None,
        moe_layers=_moe_layers(cfg, model_type, n),
        routing=routing(cfg, model_type, top_model_type),
        hash_layers=cfg.opt_int("num_hash_layers", minimum=0) or 0,
    )
