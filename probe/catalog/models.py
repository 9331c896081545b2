"""Model profiles (``probe/data/models/*.json``): layer shapes, quant formats, aliases, sources.

``resolve_model(text)`` accepts a profile name / alias / Hugging Face id (``122b``,
``Qwen3.5-122B-A10B``, ``nvidia/Qwen3.5-122B-A10B-NVFP4``), a path to a ``config.json`` or a model
folder, or a Hugging Face id present in the local HF cache; a ``-NVFP4`` / ``-FP8`` suffix selects
that quant format. ``synthetic_hf_config(profile, num_layers=2, quant=...)`` writes a config.json
dict cut to a few layers for engine-level probes.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from probe.catalog import _model_index as _index
from probe.errors import BadInputError, DataFileError, UsageError

log = logging.getLogger(__name__)

Quant = Literal["bf16", "fp8", "fp8_block", "nvfp4", "int4_w4a16", "mxfp4"]
QUANTS: tuple[str, ...] = ("bf16", "fp8", "fp8_block", "nvfp4", "int4_w4a16", "mxfp4")


class MoeShape(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    intermediate: int = Field(gt=0, description="moe_intermediate_size (per expert, before TP)")
    shared_experts: int = 0
    shared_intermediate: int | None = None
    activation: Literal["silu", "relu2", "swigluoai"] = "silu"
    latent_size: int | None = Field(default=None, description="LatentMoE: expert GEMMs run at this width")
    moe_layers: int | None = None


class MlaShape(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class ModelProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    slug: str
    aliases: list[str] = []
    hf_repo_ids: dict[str, list[str]] = {}
    user_report_variant: str | None = None
    model_type: str
    text_model_type: str | None = None
    architectures: list[str] = []
    vllm_text_architecture: str | None = Field(
        default=None, description="text-only architecture vLLM registers (for synthetic configs)"
    )
    total_params: str | None = None
    active_params: str | None = None
    num_hidden_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    mla: MlaShape | None = None
    moe: MoeShape | None = None
    dense_intermediate: int | None = None
    attention_layers: int = Field(gt=0, description="layers that hold a KV cache")
    hybrid: dict[str, Any] | None = None
    mtp_layers: int | None = 0
    quant: Quant = Field(description="the quant format probe assumes unless told otherwise")
    quant_formats: list[Quant] = []
    quant_note: str | None = None
    max_context: int | None = None
    vocab_size: int = Field(gt=0)
    field_status: dict[str, str] = {}
    sources: dict[str, str] = {}
    notes: list[str] = []
    origin: str = Field(default="catalog", description="'catalog' or the config.json it was derived from")

    @model_validator(mode="after")
    def _check(self) -> ModelProfile:
        if self.quant not in self.quant_formats and self.quant_formats:
            raise ValueError(f"{self.name}: default quant {self.quant} not in quant_formats")
        if self.moe and self.moe.top_k > self.moe.experts:
            raise ValueError(f"{self.name}: top_k {self.moe.top_k} > experts {self.moe.experts}")
        return self

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def names(self) -> list[str]:
        ids = [i for ids in self.hf_repo_ids.values() for i in ids]
        return [self.name, self.slug, *self.aliases, *ids]

    def moe_intermediate_per_shard(self, tp: int = 1) -> int | None:
        if not self.moe:
            return None
        if tp < 1 or self.moe.intermediate % tp:
            raise UsageError(
                f"{self.name}: moe_intermediate {self.moe.intermediate} does not split over TP={tp}"
            )
        return self.moe.intermediate // tp

    def moe_shape(self, tp: int = 1) -> dict[str, int] | None:
        """The fused-MoE layer shape one TP rank sees (vLLM's E / N naming: N = intermediate / TP)."""
        if not self.moe:
            return None
        return {
            "experts": self.moe.experts,
            "top_k": self.moe.top_k,
            "hidden": self.moe.latent_size or self.hidden_size,
            "intermediate": self.moe_intermediate_per_shard(tp) or 0,
            "tp": tp,
        }

    def attention_shape(self, tp: int = 1) -> dict[str, int]:
        if self.num_attention_heads % tp:
            raise UsageError(f"{self.name}: {self.num_attention_heads} heads do not split over TP={tp}")
        return {
            "num_heads": self.num_attention_heads // tp,
            "num_kv_heads": max(1, self.num_key_value_heads // tp),
            "head_dim": self.head_dim,
            "tp": tp,
        }


# ---------------------------------------------------------------- catalog


@functools.cache
def load_profiles() -> tuple[ModelProfile, ...]:
    """All packaged profiles, validated; a bad file is a bug in probe (DataFileError)."""
    folder = resources.files("probe.data").joinpath("models")
    profiles: list[ModelProfile] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        try:
            profiles.append(ModelProfile.model_validate(json.loads(entry.read_text(encoding="utf-8"))))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise DataFileError(
                f"packaged model profile probe/data/models/{entry.name} is invalid: {exc}"
            ) from exc
    keys: dict[str, str] = {}
    for prof in profiles:
        for key in {_norm(n) for n in prof.names()}:
            if key in keys and keys[key] != prof.name:
                raise DataFileError(f"model name {key!r} is claimed by both {keys[key]} and {prof.name}")
            keys[key] = prof.name
    return tuple(profiles)


def _norm(text: str) -> str:
    return _index.norm(text)


def _with_quant(prof: ModelProfile, quant: str | None) -> ModelProfile:
    if quant is None or quant == prof.quant:
        return prof
    if prof.quant_formats and quant not in prof.quant_formats:
        fp8ish = {"fp8", "fp8_block"}
        match = next((q for q in prof.quant_formats if quant in fp8ish and q in fp8ish), None)
        if match is None:
            log.info("%s: quant %s is not among the known formats %s", prof.name, quant, prof.quant_formats)
            return prof.model_copy(update={"quant": quant, "quant_formats": [*prof.quant_formats, quant]})
        quant = match
    return prof.model_copy(update={"quant": quant})


def find_profile(text: str) -> ModelProfile | None:
    """Catalog lookup by name, alias, slug or HF repo id (a ``-NVFP4``-style suffix picks the quant)."""
    hit = _index.find(text)
    if hit is None:
        return None
    data, quant = hit
    prof = next(p for p in load_profiles() if p.name == data["name"])
    return _with_quant(prof, quant)


def closest_names(text: str, n: int = 5) -> list[str]:
    return _index.closest_names(text, n)


def hf_cache_dirs() -> list[Path]:
    """Hub cache folders, in the order huggingface_hub uses them."""
    dirs: list[Path] = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        dirs.append(Path(os.environ["HUGGINGFACE_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def find_in_hf_cache(repo_id: str) -> Path | None:
    """The newest snapshot's config.json of ``org/name`` in the local HF cache (no network)."""
    if repo_id.count("/") != 1:
        return None
    folder = "models--" + repo_id.replace("/", "--")
    for cache in hf_cache_dirs():
        base = cache / folder
        if not base.is_dir():
            continue
        ref = base / "refs" / "main"
        if ref.is_file():
            cfg = base / "snapshots" / ref.read_text().strip() / "config.json"
            if cfg.is_file():
                return cfg
        configs = sorted(
            (base / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        if configs:
            return configs[0]
    return None


def resolve_model(text: str) -> ModelProfile:
    """Profile for a name / alias / HF id, a config.json or model folder, or a cached HF id."""
    if not text or not text.strip():
        raise UsageError("empty model name")
    prof = find_profile(text)
    if prof is not None:
        return prof
    path = Path(text).expanduser()
    if path.is_dir() or path.is_file():
        return profile_from_path(path)
    cached = find_in_hf_cache(text.strip())
    if cached is not None:
        return profile_from_path(cached.parent, name=text.strip())
    close = closest_names(text)
    hint = f"did you mean: {', '.join(close)}?" if close else "run `probe models` for the list"
    raise UsageError(
        f"unknown model {text!r} (not a profile, a config.json path, or a model in the local "
        f"Hugging Face cache)",
        hint=hint + " — or pass a path to a config.json / model folder",
    )


# ---------------------------------------------------------------- from config.json


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


def profile_from_config(
    config: dict[str, Any], *, name: str, origin: str, hf_quant: dict[str, Any] | None = None
) -> ModelProfile:
    """Derive a profile from a Hugging Face config.json (nested ``text_config`` handled)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    cfg = {**config, **text} if text else dict(config)
    if text and "quantization_config" not in cfg and "quantization_config" in config:
        cfg["quantization_config"] = config["quantization_config"]
    try:
        hidden = int(cfg["hidden_size"])
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(
            f"{origin}: config.json lacks a usable {exc} (hidden_size / num_hidden_layers / "
            "num_attention_heads)"
        ) from exc
    kv = int(_first(cfg, "num_key_value_heads") or heads)
    mla = None
    if cfg.get("kv_lora_rank"):
        mla = MlaShape(
            q_lora_rank=cfg.get("q_lora_rank"),
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            qk_nope_head_dim=int(cfg.get("qk_nope_head_dim", 128)),
            qk_rope_head_dim=int(cfg.get("qk_rope_head_dim", 64)),
            v_head_dim=int(cfg.get("v_head_dim", 128)),
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    else:
        head_dim = int(_first(cfg, "head_dim") or hidden // heads)
    experts = _first(cfg, "num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
    moe = None
    if experts and int(experts) > 1:
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
        moe = MoeShape(
            experts=int(experts),
            top_k=int(top_k),
            intermediate=int(inter),
            shared_experts=n_shared,
            shared_intermediate=int(shared_i) if shared_i else None,
            activation="relu2" if "relu2" in act else ("swigluoai" if cfg.get("swiglu_limit") else "silu"),
            latent_size=cfg.get("moe_latent_size"),
            moe_layers=max(1, layers - int(cfg.get("first_k_dense_replace") or 0)),
        )
    attn_layers = layers
    hybrid: dict[str, Any] | None = None
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and any(t == "linear_attention" for t in layer_types):
        attn_layers = sum(1 for t in layer_types if t == "full_attention") or layers
        hybrid = {
            "linear_attention_gated_deltanet": len(layer_types) - attn_layers,
            "full_attention": attn_layers,
        }
    elif isinstance(cfg.get("hybrid_override_pattern"), str):
        pat = cfg["hybrid_override_pattern"]
        attn_layers = pat.count("*") or layers
        hybrid = {
            "pattern": pat,
            "mamba2_layers": pat.count("M"),
            "moe_layers": pat.count("E"),
            "attention_layers": pat.count("*"),
        }
        if moe:
            moe = moe.model_copy(update={"moe_layers": pat.count("E")})
    quant = quant_from_config(cfg, hf_quant)
    archs = list(config.get("architectures") or [])
    return ModelProfile(
        name=name,
        slug=_norm(name).replace("/", "--"),
        aliases=[],
        hf_repo_ids={},
        model_type=str(config.get("model_type") or cfg.get("model_type") or "unknown"),
        text_model_type=str(text["model_type"]) if text and text.get("model_type") else None,
        architectures=archs,
        vllm_text_architecture=archs[0] if archs else None,
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        mla=mla,
        moe=moe,
        dense_intermediate=None if moe else cfg.get("intermediate_size"),
        attention_layers=attn_layers,
        hybrid=hybrid,
        mtp_layers=int(_first(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0),
        quant=quant,
        quant_formats=[quant],  # type: ignore[list-item]
        max_context=_first(cfg, "max_position_embeddings"),
        vocab_size=int(cfg.get("vocab_size") or 1),
        sources={"config.json": origin},
        origin=origin,
    )


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


# ---------------------------------------------------------------- synthetic configs

_EXPERT_ONLY_EXCLUDES: dict[str, list[str]] = {
    "default": [
        "lm_head",
        "*self_attn*",
        "*shared_expert*",
        "*mlp.gate",
        "*linear_attn*",
        "*visual*",
        "*mtp*",
    ],
    "nemotron_h": [
        "lm_head",
        "*mixer.q_proj*",
        "*mixer.k_proj*",
        "*mixer.v_proj*",
        "*mixer.o_proj*",
        "*mixer.in_proj*",
        "*mixer.out_proj*",
        "*mixer.conv1d*",
        "*mixer.gate*",
        "*shared_experts*",
    ],
}


# vLLM quantization method name per quant scheme: the name ``get_quantization_config(name)`` takes for a
# checkpoint whose config.json carries :func:`quantization_config` (``None``: unquantized). The
# ``gptq`` / ``modelopt`` checkpoints are loaded by vLLM's ``gptq_marlin`` / ``modelopt_fp4`` classes.
VLLM_QUANT_METHOD: dict[str, str | None] = {
    "bf16": None,
    "fp8": "fp8",
    "fp8_block": "fp8",
    "nvfp4": "modelopt_fp4",
    "int4_w4a16": "gptq_marlin",
    "mxfp4": "mxfp4",
}


def quantization_config(quant: str, exclude_modules: list[str] | None = None) -> dict[str, Any] | None:
    """The config.json ``quantization_config`` a checkpoint in ``quant`` carries (``None`` for bf16).

    The single source for these dicts: the engine probe writes them into synthetic config.json files
    and the MoE probe passes them to vLLM's ``QuantizationConfig.from_config``. ``exclude_modules``
    (NVFP4 / ModelOpt only) lists the modules left in bf16.
    """
    if quant == "bf16":
        return None
    if quant == "nvfp4":
        return {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "group_size": 16,
            "kv_cache_quant_algo": None,
            "exclude_modules": list(exclude_modules or []),
        }
    if quant == "fp8":
        return {"quant_method": "fp8", "activation_scheme": "dynamic"}
    if quant == "fp8_block":
        return {
            "quant_method": "fp8",
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "weight_block_size": [128, 128],
        }
    if quant == "mxfp4":
        return {"quant_method": "mxfp4"}
    if quant == "int4_w4a16":
        return {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": 128,
            "desc_act": False,
            "sym": True,
            "lm_head": False,
        }
    raise UsageError(f"unknown quant {quant!r}; known: {', '.join(QUANTS)}")


def _quantization_config(profile: ModelProfile, quant: str) -> dict[str, Any] | None:
    """:func:`quantization_config` with the routed experts alone quantized (NVFP4 excludes the rest)."""
    excludes = _EXPERT_ONLY_EXCLUDES.get(profile.model_type, _EXPERT_ONLY_EXCLUDES["default"])
    return quantization_config(quant, exclude_modules=excludes if quant == "nvfp4" else None)


def _nemotron_pattern(n: int) -> str:
    if n == 1:
        return "E"
    if n == 2:
        return "*E"
    if n == 3:
        return "M*E"
    return ("ME*E" + "ME" * n)[:n]


def synthetic_hf_config(
    profile: ModelProfile, num_layers: int = 2, quant: str | None = None
) -> dict[str, Any]:
    """An HF config.json dict with the profile's real layer widths, cut to ``num_layers``.

    Text-only (the architecture vLLM registers for the text model), except for multimodal families
    whose text model vLLM builds only inside the multimodal class (Qwen3.5 / 3.6): those get the
    full multimodal config with the text model under ``text_config`` and a minimal
    ``vision_config`` (see ``_VISION_WRAPPED``); use :func:`text_config_of` to read the text part.

    Every layer kind the model has (MoE, full attention, linear attention / Mamba) is kept at least
    once where ``num_layers`` allows. ``quant`` (default: the profile's) adds a
    ``quantization_config`` that puts the routed experts in that format.
    """
    if num_layers < 1:
        raise UsageError("num_layers must be >= 1")
    q = quant or profile.quant
    mt = profile.text_model_type or profile.model_type
    cfg: dict[str, Any] = {
        "architectures": [profile.vllm_text_architecture or (profile.architectures or ["?"])[0]],
        "model_type": mt,
        "hidden_size": profile.hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": profile.num_attention_heads,
        "num_key_value_heads": profile.num_key_value_heads,
        "head_dim": profile.head_dim,
        "vocab_size": profile.vocab_size,
        "max_position_embeddings": min(profile.max_context or 4096, 8192),
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "hidden_act": "silu",
    }
    moe = profile.moe
    if profile.dense_intermediate:
        cfg["intermediate_size"] = profile.dense_intermediate
    if mt.startswith("qwen3_5") or mt == "qwen3_next":
        types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(num_layers)]
        if "full_attention" not in types:
            types[-1] = "full_attention"
        hy = profile.hybrid or {}
        cfg.update(
            {
                "layer_types": types,
                "full_attention_interval": 4,
                "partial_rotary_factor": 0.25,
                "attn_output_gate": True,
                "linear_conv_kernel_dim": hy.get("gdn_conv_kernel", 4),
                "linear_key_head_dim": hy.get("gdn_key_head_dim", 128),
                "linear_value_head_dim": hy.get("gdn_value_head_dim", 128),
                "linear_num_key_heads": hy.get("gdn_linear_num_key_heads", 16),
                "linear_num_value_heads": hy.get("gdn_linear_num_value_heads", 32),
                "mtp_num_hidden_layers": 0,
            }
        )
        if mt.startswith("qwen3_5"):
            # Qwen3.5's text model rotates with interleaved M-RoPE over 1/4 of head_dim (the HF
            # config's text_config.rope_parameters); the three sections sum to rotary_dim / 2
            half = int(profile.head_dim * 0.25) // 2
            sec = (half + 2) // 3
            cfg["rope_parameters"] = {
                "rope_type": "default",
                "rope_theta": 10_000_000,
                "partial_rotary_factor": 0.25,
                "mrope_section": [sec, sec, half - 2 * sec],
                "mrope_interleaved": True,
            }
        else:
            cfg["rope_theta"] = 10_000_000
    if moe:
        if mt in ("mixtral", "gpt_oss"):
            cfg.update(
                {
                    "num_local_experts": moe.experts,
                    "num_experts_per_tok": moe.top_k,
                    "intermediate_size": moe.intermediate,
                }
            )
            if mt == "gpt_oss":
                cfg.update(
                    {
                        "experts_per_token": moe.top_k,
                        "swiglu_limit": 7.0,
                        "sliding_window": 128,
                        "layer_types": [
                            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)
                        ],
                    }
                )
        elif mt in ("deepseek_v3", "glm4_moe", "nemotron_h"):
            cfg.update(
                {
                    "n_routed_experts": moe.experts,
                    "num_experts_per_tok": moe.top_k,
                    "moe_intermediate_size": moe.intermediate,
                    "n_shared_experts": moe.shared_experts,
                    "norm_topk_prob": True,
                }
            )
        else:
            cfg.update(
                {
                    "num_experts": moe.experts,
                    "num_experts_per_tok": moe.top_k,
                    "moe_intermediate_size": moe.intermediate,
                    "norm_topk_prob": True,
                    "decoder_sparse_step": 1,
                    "mlp_only_layers": [],
                }
            )
            if moe.shared_intermediate:
                cfg["shared_expert_intermediate_size"] = moe.shared_intermediate
    if mt == "deepseek_v3" and profile.mla:
        cfg.update(profile.mla.model_dump())
        cfg.update(
            {
                "first_k_dense_replace": 1 if num_layers > 1 else 0,
                "n_group": 8,
                "topk_group": 4,
                "scoring_func": "sigmoid",
                "topk_method": "noaux_tc",
                "routed_scaling_factor": 2.5,
                "num_nextn_predict_layers": 0,
                "moe_layer_freq": 1,
            }
        )
    if mt == "glm4_moe":
        cfg.update(
            {
                "first_k_dense_replace": 1 if num_layers > 1 else 0,
                "partial_rotary_factor": 0.5,
                "attention_bias": True,
                "n_group": 1,
                "topk_group": 1,
                "routed_scaling_factor": 1.0,
                "num_nextn_predict_layers": 0,
            }
        )
    if mt == "nemotron_h" and moe:
        hy = profile.hybrid or {}
        cfg.update(
            {
                "hybrid_override_pattern": _nemotron_pattern(num_layers),
                "mlp_hidden_act": "relu2",
                "moe_shared_expert_intermediate_size": moe.shared_intermediate,
                "mamba_num_heads": hy.get("mamba_num_heads", 64),
                "mamba_head_dim": hy.get("mamba_head_dim", 64),
                "ssm_state_size": hy.get("ssm_state_size", 128),
                "n_groups": hy.get("n_groups", 8),
                "conv_kernel": hy.get("conv_kernel", 4),
                "expand": hy.get("expand", 2),
                "n_group": 1,
                "topk_group": 1,
            }
        )
        cfg.pop("n_shared_experts", None)
        if moe.latent_size:
            cfg["moe_latent_size"] = moe.latent_size
    if profile.model_type in _VISION_WRAPPED and mt != profile.model_type:
        cfg = _vision_wrapped(profile, cfg)
    qc = _quantization_config(profile, q)
    if qc:
        cfg["quantization_config"] = qc
    return copy.deepcopy(cfg)


# Multimodal model types whose text model vLLM only builds inside the multimodal class: vLLM 0.26
# registers no ``Qwen3_5MoeForCausalLM`` (vllm/model_executor/models/registry.py) and maps the
# architecture name to ``Qwen3_5MoeForConditionalGeneration``, whose processor demands the full
# ``Qwen3_5MoeConfig`` (text_config + vision_config). vLLM 0.33 registers both. The synthetic config
# is therefore the multimodal one (with a small vision tower the engine probe never builds: it passes
# ``language_model_only=True``), which both versions accept.
_VISION_WRAPPED: dict[str, str] = {
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
}


def text_config_of(config: dict[str, Any]) -> dict[str, Any]:
    """The text model's part of a config.json dict (``text_config`` when nested)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def _vision_wrapped(profile: ModelProfile, text: dict[str, Any]) -> dict[str, Any]:
    arch = next(
        (a for a in profile.architectures if a.endswith("ForConditionalGeneration")),
        _VISION_WRAPPED[profile.model_type],
    )
    text = {k: v for k, v in text.items() if k != "architectures"}
    return {
        "architectures": [arch],
        "model_type": profile.model_type,
        "text_config": text,
        # the smallest valid Qwen3-VL vision tower: 1 block, 2 heads of 64 (rotary over half of
        # each head), merger projecting to the text hidden size; 2304 = 48^2 position embeddings
        "vision_config": {
            "model_type": profile.model_type,
            "depth": 1,
            "hidden_size": 128,
            "num_heads": 2,
            "intermediate_size": 256,
            "hidden_act": "gelu_pytorch_tanh",
            "in_channels": 3,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": profile.hidden_size,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [],
        },
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
