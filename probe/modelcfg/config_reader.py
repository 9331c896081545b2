"""A model profile derived from a Hugging Face ``config.json`` — read the way vLLM reads it.

``profile_from_path`` reads a config.json file or a model folder (plus ModelOpt's
``hf_quant_config.json`` next to it); ``profile_from_config`` turns the parsed JSON into a
:class:`~probe.catalog.profile.ModelProfile` with its per-layer reading: the distinct attention
kinds (:mod:`probe.modelcfg.attention_layers`), the routed experts (:mod:`probe.modelcfg.experts`)
and the quant scheme, experts apart (:mod:`probe.modelcfg.quant_scheme`). The text config of a
multimodal model (``text_config``) is what is read, as vLLM's ``hf_text_config``.

Standard library only (this is on ``probe recommend``'s path). Every number used is checked
(:mod:`probe.modelcfg.values`): a config given with ``--model`` that lacks a field, or has a
zero / negative / non-integer / non-finite one, is a usage error naming the field (exit 2).
The agreement with vLLM's own reading of the same files is a test (tests/catalog/test_vllm_reading.py).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from probe.catalog.layer_kinds import QuantScheme
from probe.catalog.names import norm
from probe.catalog.profile import MlaShape, ModelProfile, MoeShape, check_profile
from probe.catalog.quants import QUANTS
from probe.errors import UsageError
from probe.modelcfg.attention_layers import LayerPlan, read_layers
from probe.modelcfg.experts import read_moe
from probe.modelcfg.quant_scheme import read_quant
from probe.modelcfg.values import Cfg

log = logging.getLogger(__name__)

MAX_CONFIG_BYTES = 16 * 2**20  # real config.json files are < 100 kB
# schemes without an MoE probe / oracle family of their own -> the nearest of probe's quant names
_PROBE_QUANT = {"nvfp4_w4a16": "nvfp4", "mxfp8": "fp8"}


def _text_config(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the text model's config, merged over the top level; the nested ``text_config`` or None)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    cfg = {**config, **text} if text else dict(config)
    if text and "quantization_config" not in text and "quantization_config" in config:
        cfg["quantization_config"] = config["quantization_config"]
    return cfg, text


def _mla_shape(cfg: Cfg) -> MlaShape:
    return MlaShape(
        q_lora_rank=cfg.opt_int("q_lora_rank"),
        kv_lora_rank=cfg.need_int("kv_lora_rank"),
        qk_nope_head_dim=cfg.opt_int("qk_nope_head_dim", minimum=0) or 128,
        qk_rope_head_dim=cfg.need_int("qk_rope_head_dim"),
        v_head_dim=cfg.opt_int("v_head_dim") or 128,
    )


def _legacy_hybrid(cfg: Cfg, plan: LayerPlan) -> dict[str, Any] | None:
    """The ``hybrid`` summary the engine probe's synthetic configs read (probe.probes.hf_config)."""
    mixers = dict(plan.mixers)
    if isinstance(cfg.data.get("hybrid_override_pattern"), str):
        pat = cfg.data["hybrid_override_pattern"]
        return {"pattern": pat, "mamba2_layers": pat.count("M"), "moe_layers": pat.count("E"),
                "attention_layers": pat.count("*")}  # fmt: skip
    if "mamba2" in mixers:
        return {"mamba2_layers": mixers["mamba2"], "attention_layers": plan.attention_layers}
    if "gdn_attn" in mixers:
        return {
            "linear_attention_gated_deltanet": mixers["gdn_attn"],
            "full_attention": plan.attention_layers,
        }
    windows = {k.sliding_window for k in plan.kinds if k.sliding_window}
    sinks = any(k.sink for k in plan.kinds)
    if windows or sinks:
        return {"sliding_window": min(windows) if windows else None, "attention_sinks": sinks}
    return None


def _quant_note(scheme: QuantScheme, quant: str, moe: MoeShape | None) -> str | None:
    parts = []
    if moe is not None and scheme.experts != scheme.linear:
        parts.append(f"routed experts {scheme.experts}, other linear layers {scheme.linear}")
    if ((scheme.experts or scheme.linear) if moe else scheme.linear) != quant:
        parts.append(f"read as {quant}, the nearest quant probe has probes for")
    return "; ".join(parts) or None


#: the most layers a config may declare (the largest released models: a few hundred)
MAX_MODEL_LAYERS = 100_000


def _shape(cfg: Cfg) -> tuple[int, int, int]:
    layers = cfg.opt_int("num_hidden_layers")
    for key in ("hybrid_override_pattern", "layers_block_type"):  # NemotronHConfig: one layer per entry
        if layers is None and isinstance(cfg.data.get(key), (str, list)):
            layers = len(cfg.data[key]) or None
    if layers is None:
        layers = cfg.need_int("num_hidden_layers")
    if layers > MAX_MODEL_LAYERS:  # each layer is read: 10^9 of them would never end (or fit)
        raise cfg.bad("num_hidden_layers", f"is {layers:,}: more than the {MAX_MODEL_LAYERS:,} layers read")
    return cfg.need_int("hidden_size"), layers, cfg.need_int("num_attention_heads")


def profile_from_config(
    config: dict[str, Any], *, name: str, origin: str, hf_quant: dict[str, Any] | None = None
) -> ModelProfile:
    """Derive a profile from a Hugging Face config.json (nested ``text_config`` handled)."""
    data, text = _text_config(config)
    cfg = Cfg(data, origin)
    model_type = str(data.get("model_type") or "unknown")
    top_type = str(config.get("model_type") or model_type)
    hidden, layers, heads = _shape(cfg)
    plan = read_layers(cfg, model_type, layers, heads, hidden)
    moe = read_moe(cfg, model_type, top_type, layers, hidden)
    scheme = read_quant(config, text, hf_quant, first_moe_layer=_first_moe_layer(cfg))
    if moe is not None:
        moe = replace(moe, scheme=scheme.experts)
    read_as = (scheme.experts or scheme.linear) if moe is not None else scheme.linear
    quant = _PROBE_QUANT.get(read_as, read_as)
    quant = quant if quant in QUANTS else "bf16"
    mla = _mla_shape(cfg) if any(k.mla for k in plan.kinds) else None
    archs = tuple(str(a) for a in config.get("architectures") or [])
    profile = ModelProfile(
        name=name,
        slug=norm(name).replace("/", "--"),
        model_type=top_type,
        text_model_type=str(text["model_type"]) if text and text.get("model_type") else None,
        architectures=archs,
        vllm_text_architecture=archs[0] if archs else None,
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=cfg.opt_int("num_key_value_heads") or heads,
        head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim if mla else plan_head(plan, cfg, hidden, heads),
        mla=mla,
        moe=moe,
        dense_intermediate=None if moe else cfg.opt_int("intermediate_size"),
        attention_layers=plan.attention_layers or layers,
        hybrid=_legacy_hybrid(cfg, plan),
        mtp_layers=cfg.opt_int("num_nextn_predict_layers", "mtp_num_hidden_layers", minimum=0) or 0,
        quant=quant,
        quant_formats=(quant,),
        quant_note=_quant_note(scheme, quant, moe),
        max_context=cfg.opt_int("max_position_embeddings"),
        vocab_size=cfg.opt_int("vocab_size") or 1,
        sources={"config.json": origin},
        origin=origin,
        attention_kinds=plan.kinds,
        mixer_layers=plan.mixers,
        quant_scheme=scheme,
    )
    try:
        return check_profile(profile)
    except ValueError as exc:
        raise UsageError(f"{origin}: {exc}") from exc


def plan_head(plan: LayerPlan, cfg: Cfg, hidden: int, heads: int) -> int:
    """The headline head size: the config's ``head_dim`` (else hidden / heads), as vLLM's get_head_size."""
    return (
        cfg.opt_int("head_dim", minimum=0) or cfg.opt_int("hidden_size_per_head") or max(1, hidden // heads)
    )


def _first_moe_layer(cfg: Cfg) -> int:
    freq = cfg.data.get("moe_layer_freq")
    if isinstance(freq, list):
        return next((i for i, f in enumerate(freq) if f), 0)
    return cfg.opt_int("first_k_dense_replace", minimum=0) or 0


def _read_json(path: Path, what: str) -> Any:
    from probe.errors import BadInputError
    from probe.userfile import open_regular_fd, read_json

    try:
        fd, size = open_regular_fd(path, what)  # a regular file only (a FIFO is never opened for reading)
        os.close(fd)
        if size > MAX_CONFIG_BYTES:
            raise UsageError(f"{path}: {size} bytes is too large for a {what} (limit {MAX_CONFIG_BYTES})")
        return read_json(path, what=what, limit=MAX_CONFIG_BYTES, gz=False)
    except BadInputError as exc:  # bounded in size and nesting
        raise UsageError(f"{path}: not a readable JSON {what} ({exc})") from None


def profile_from_path(path: Path, *, name: str | None = None) -> ModelProfile:
    cfg_path = path / "config.json" if path.is_dir() else path
    if not cfg_path.is_file():
        raise UsageError(f"{path}: no config.json in this folder")
    config = _read_json(cfg_path, "config")
    if not isinstance(config, dict):
        raise UsageError(f"{cfg_path}: a config.json holds a JSON object")
    hf_quant = None
    hq = cfg_path.parent / "hf_quant_config.json"
    if hq.is_file():
        try:
            hf_quant = _read_json(hq, "hf_quant_config.json")
        except UsageError as exc:
            log.warning("%s, ignored", exc)
    label = name or (cfg_path.parent.name if cfg_path.name == "config.json" else cfg_path.stem)
    if label.startswith("models--"):
        label = label[len("models--") :].replace("--", "/")
    return profile_from_config(config, name=label, origin=str(cfg_path), hf_quant=hf_quant)
