"""A model profile derived from a Hugging Face ``config.json`` (nested ``text_config`` handled).

``profile_from_path`` reads a config.json file or a model folder (plus ModelOpt's
``hf_quant_config.json`` next to it); ``quant_from_config`` maps a ``quantization_config`` to probe's
quant names (:data:`probe.catalog.quants.QUANTS`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from probe.catalog.names import norm
from probe.catalog.profile import MlaShape, ModelProfile, MoeShape, check_profile
from probe.errors import BadInputError, UsageError

log = logging.getLogger(__name__)


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def quant_from_config(cfg: dict[str, Any], hf_quant: dict[str, Any] | None = None) -> str:
    """Map ``quantization_config`` (or ModelOpt's ``hf_quant_config.json``) to probe's quant names."""
    qc = cfg.get("quantization_config") or {}
    if not qc and hf_quant:
        qc = {"quant_method": "modelopt", **(hf_quant.get("quantization") or hf_quant)}
    if not isinstance(qc, dict) or not qc:
        return "bf16"
    method = str(qc.get("quant_method", "")).lower()
    algo = str(qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo") or "").upper()
    if method == "modelopt" or algo:
        if "FP4" in algo:
            return "nvfp4"
        if "FP8" in algo:
            return "fp8"
        if "INT4" in algo or "W4A16" in algo:
            return "int4_w4a16"
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8"):
        return "fp8_block" if qc.get("weight_block_size") else "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin", "moe_wna16", "auto-round"):
        return "int4_w4a16"
    if method == "compressed-tensors":
        blob = json.dumps(qc).lower()
        if "nvfp4" in blob:
            return "nvfp4"
        if "float-quantized" in blob or '"type": "float"' in blob:
            return (
                "fp8_block"
                if '"block_structure"' in blob and "null" not in blob.split('"block_structure"')[1][:8]
                else "fp8"
            )
        if "pack-quantized" in blob or '"num_bits": 4' in blob:
            return "int4_w4a16"
    log.info("unrecognised quantization_config %s; assuming bf16", method or qc)
    return "bf16"


def _text_config(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the text model's config, merged over the top level; the nested ``text_config`` or None)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    cfg = {**config, **text} if text else dict(config)
    if text and "quantization_config" not in cfg and "quantization_config" in config:
        cfg["quantization_config"] = config["quantization_config"]
    return cfg, text


def _mla_shape(cfg: dict[str, Any]) -> MlaShape | None:
    if not cfg.get("kv_lora_rank"):
        return None
    return MlaShape(
        q_lora_rank=cfg.get("q_lora_rank"),
        kv_lora_rank=int(cfg["kv_lora_rank"]),
        qk_nope_head_dim=int(cfg.get("qk_nope_head_dim", 128)),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim", 64)),
        v_head_dim=int(cfg.get("v_head_dim", 128)),
    )


def _moe_shape(cfg: dict[str, Any], layers: int, origin: str) -> MoeShape | None:
    experts = _first(cfg, "num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
    if not experts or int(experts) <= 1:
        return None
    top_k = _first(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk", "num_selected_experts")
    inter = _first(cfg, "moe_intermediate_size", "expert_intermediate_size")
    if inter is None:  # Mixtral / gpt-oss keep the expert width in intermediate_size
        inter = cfg.get("intermediate_size")
    if top_k is None or inter is None:
        raise BadInputError(
            f"{origin}: MoE config (experts={experts}) lacks num_experts_per_tok or the expert width"
        )
    act = str(_first(cfg, "mlp_hidden_act", "hidden_act") or "silu").lower()
    shared_i = _first(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
    n_shared = int(_first(cfg, "n_shared_experts") or (1 if shared_i else 0))
    if n_shared and shared_i is None and cfg.get("n_shared_experts"):
        shared_i = int(inter) * n_shared
    return MoeShape(
        experts=int(experts),
        top_k=int(top_k),
        intermediate=int(inter),
        shared_experts=n_shared,
        shared_intermediate=int(shared_i) if shared_i else None,
        activation="relu2" if "relu2" in act else ("swigluoai" if cfg.get("swiglu_limit") else "silu"),
        latent_size=cfg.get("moe_latent_size"),
        moe_layers=max(1, layers - int(cfg.get("first_k_dense_replace") or 0)),
    )


def _hybrid_layers(
    cfg: dict[str, Any], layers: int, moe: MoeShape | None
) -> tuple[int, dict[str, Any] | None, MoeShape | None]:
    """(layers with a KV cache, the hybrid layout or None, the MoE shape with its layer count)."""
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and any(t == "linear_attention" for t in layer_types):
        attn_layers = sum(1 for t in layer_types if t == "full_attention") or layers
        hybrid = {
            "linear_attention_gated_deltanet": len(layer_types) - attn_layers,
            "full_attention": attn_layers,
        }
        return attn_layers, hybrid, moe
    if isinstance(cfg.get("hybrid_override_pattern"), str):
        pat = cfg["hybrid_override_pattern"]
        hybrid = {
            "pattern": pat,
            "mamba2_layers": pat.count("M"),
            "moe_layers": pat.count("E"),
            "attention_layers": pat.count("*"),
        }
        moe = replace(moe, moe_layers=pat.count("E")) if moe else None
        return pat.count("*") or layers, hybrid, moe
    return layers, None, moe


def _sizes(cfg: dict[str, Any], origin: str) -> tuple[int, int, int]:
    try:
        return int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(
            f"{origin}: config.json lacks a usable {exc} (hidden_size / num_hidden_layers / "
            "num_attention_heads)"
        ) from exc


def profile_from_config(
    config: dict[str, Any], *, name: str, origin: str, hf_quant: dict[str, Any] | None = None
) -> ModelProfile:
    """Derive a profile from a Hugging Face config.json (nested ``text_config`` handled)."""
    cfg, text = _text_config(config)
    hidden, layers, heads = _sizes(cfg, origin)
    mla = _mla_shape(cfg)
    head_dim = (
        mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla
        else int(_first(cfg, "head_dim") or hidden // heads)
    )
    attn_layers, hybrid, moe = _hybrid_layers(cfg, layers, _moe_shape(cfg, layers, origin))
    quant = quant_from_config(cfg, hf_quant)
    archs = tuple(config.get("architectures") or [])
    profile = ModelProfile(
        name=name,
        slug=norm(name).replace("/", "--"),
        model_type=str(config.get("model_type") or cfg.get("model_type") or "unknown"),
        text_model_type=str(text["model_type"]) if text and text.get("model_type") else None,
        architectures=archs,
        vllm_text_architecture=archs[0] if archs else None,
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=int(_first(cfg, "num_key_value_heads") or heads),
        head_dim=head_dim,
        mla=mla,
        moe=moe,
        dense_intermediate=None if moe else cfg.get("intermediate_size"),
        attention_layers=attn_layers,
        hybrid=hybrid,
        mtp_layers=int(_first(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0),
        quant=quant,
        quant_formats=(quant,),
        max_context=_first(cfg, "max_position_embeddings"),
        vocab_size=int(cfg.get("vocab_size") or 1),
        sources={"config.json": origin},
        origin=origin,
    )
    try:
        return check_profile(profile)
    except ValueError as exc:
        raise BadInputError(f"{origin}: {exc}") from exc


def profile_from_path(path: Path, *, name: str | None = None) -> ModelProfile:
    cfg_path = path / "config.json" if path.is_dir() else path
    if not cfg_path.is_file():
        raise UsageError(f"{path}: no config.json in this folder")
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{cfg_path}: not a readable JSON config ({exc})") from exc
    if not isinstance(config, dict):
        raise BadInputError(f"{cfg_path}: a config.json holds a JSON object")
    hf_quant = None
    hq = cfg_path.parent / "hf_quant_config.json"
    if hq.is_file():
        try:
            hf_quant = json.loads(hq.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            log.warning("%s: unreadable, ignored", hq)
    label = name or (cfg_path.parent.name if cfg_path.name == "config.json" else cfg_path.stem)
    if label.startswith("models--"):
        label = label[len("models--") :].replace("--", "/")
    return profile_from_config(config, name=label, origin=str(cfg_path), hf_quant=hf_quant)
