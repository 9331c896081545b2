"""The model profile type: layer shapes, quant formats, aliases and sources of one LLM.

One type for every user (``probe models``, the planner, the engine probe, ``recommend``). Frozen
dataclasses (``dataclasses.replace`` for a changed copy) checked by hand rather than by pydantic:
``recommend`` reads the catalog on its start-up path, which must stay well under 0.2 s as a whole
process, and importing pydantic alone costs ~100 ms there.
:func:`profile_from_dict` raises ``ValueError`` on anything malformed; the catalog loader turns that
into a ``DataFileError``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, get_args

from probe.catalog.layer_kinds import SCHEMES, AttentionKind, QuantScheme, Routing, attention_kind_from_dict
from probe.catalog.quants import QUANTS
from probe.errors import UsageError

# the experts' activation as the config names it ("relu2": nemotron_h's non-gated squared ReLU)
Activation = Literal["silu", "gelu", "gelu_tanh", "relu2", "swigluoai"]


@dataclass(frozen=True)
class MoeShape:
    experts: int
    top_k: int
    intermediate: int  # moe_intermediate_size (per expert, before TP)
    shared_experts: int = 0
    shared_intermediate: int | None = None
    activation: Activation = "silu"
    latent_size: int | None = None  # LatentMoE: expert GEMMs run at this width
    moe_layers: int | None = None
    routing: Routing | None = None  # None: probe/data/oracle_routing.json by model_type
    scheme: str | None = None  # the experts' own quant scheme (one of SCHEMES); None: the profile's quant
    hash_layers: int = 0  # the first MoE layers route by token hash, without a score bias (DeepSeek-V4)


@dataclass(frozen=True)
class MlaShape:
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModelProfile:
    name: str
    slug: str
    model_type: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    attention_layers: int  # layers that hold a KV cache
    quant: str  # the quant format probe assumes unless told otherwise (one of QUANTS)
    vocab_size: int
    aliases: tuple[str, ...] = ()
    hf_repo_ids: dict[str, list[str]] = field(default_factory=dict)
    user_report_variant: str | None = None
    text_model_type: str | None = None
    architectures: tuple[str, ...] = ()
    vllm_text_architecture: str | None = None  # text-only architecture vLLM registers
    total_params: str | None = None
    active_params: str | None = None
    mla: MlaShape | None = None
    moe: MoeShape | None = None
    dense_intermediate: int | None = None
    hybrid: dict[str, Any] | None = None
    mtp_layers: int | None = 0
    quant_formats: tuple[str, ...] = ()
    quant_note: str | None = None
    max_context: int | None = None
    field_status: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    origin: str = "catalog"  # 'catalog' or the config.json it was derived from
    # per distinct layer type, as vLLM builds the layers (probe.catalog.layer_kinds); empty for a packaged
    # profile that does not list them: one kind derived from the fields above (layer_kinds())
    attention_kinds: tuple[AttentionKind, ...] = ()
    mixer_layers: tuple[tuple[str, int], ...] = ()  # layers without a KV cache: (vLLM mamba_type, count)
    quant_scheme: QuantScheme | None = None

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def layer_kinds(self) -> tuple[AttentionKind, ...]:
        """The distinct attention layer kinds: as read from a config (possibly none: no layer goes
        through vLLM's attention selector), else derived from a packaged profile's fields (its
        ``hybrid`` counts of sliding / full layers when it has them)."""
        if self.attention_kinds or self.origin != "catalog":
            return self.attention_kinds
        hybrid = self.hybrid or {}
        window = hybrid.get("sliding_window")
        base = AttentionKind(
            head_size=self.mla.kv_lora_rank + self.mla.qk_rope_head_dim if self.mla else self.head_dim,
            num_heads=self.num_attention_heads,
            num_kv_heads=1 if self.mla else self.num_key_value_heads,
            layers=self.attention_layers,
            sliding_window=window if isinstance(window, int) and window > 0 else None,
            sink=bool(hybrid.get("attention_sinks")),
            mla=self.mla is not None,
        )
        sliding, full = hybrid.get("sliding_attention"), hybrid.get("full_attention")
        if base.sliding_window and isinstance(sliding, int) and isinstance(full, int) and sliding > 0 < full:
            return replace(base, layers=sliding), replace(base, layers=full, sliding_window=None)
        return (base,)

    def mixers(self) -> tuple[tuple[str, int], ...]:
        """Layers without a KV cache of the attention selector's (vLLM ``mamba_type`` name, count)."""
        if self.mixer_layers or self.origin != "catalog":
            return self.mixer_layers
        hybrid = self.hybrid or {}
        out = [
            ("gdn_attn", hybrid.get("linear_attention_gated_deltanet")),
            ("mamba2", hybrid.get("mamba2_layers")),
        ]
        return tuple((k, n) for k, n in out if isinstance(n, int) and n > 0)

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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, in field order of the packaged files (tuples as lists)."""
        data = asdict(self)
        data["moe"] = _moe_dict(self.moe) if self.moe else None
        data["mla"] = asdict(self.mla) if self.mla else None
        order = [
            "name", "slug", "aliases", "hf_repo_ids", "user_report_variant", "model_type", "text_model_type",
            "architectures", "vllm_text_architecture", "total_params", "active_params", "num_hidden_layers",
            "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "mla", "moe",
            "dense_intermediate", "attention_layers", "hybrid", "mtp_layers", "quant", "quant_formats",
            "quant_note", "max_context", "vocab_size", "field_status", "sources", "notes", "origin",
        ]  # fmt: skip
        out = {k: list(data[k]) if isinstance(data[k], tuple) else data[k] for k in order}
        if self.attention_kinds or self.mixer_layers or self.quant_scheme:  # a per-layer reading
            out["attention_kinds"] = [k.spec() for k in self.attention_kinds]
            out["mixer_layers"] = dict(self.mixer_layers)
            out["quant_scheme"] = asdict(self.quant_scheme) if self.quant_scheme else None
        return out


def _moe_dict(moe: MoeShape) -> dict[str, Any]:
    """The MoE shape as the packaged files write it (the per-layer reading's fields when set)."""
    out = asdict(moe)
    for key, default in (("routing", None), ("scheme", None), ("hash_layers", 0)):
        if out[key] == default:
            del out[key]
    return out


# ---------------------------------------------------------------- validation of the packaged JSON

_INT, _OPT_INT, _STR, _OPT_STR = "int", "int?", "str", "str?"
_POSITIVE = {"experts", "top_k", "intermediate", "num_hidden_layers", "hidden_size", "num_attention_heads",
             "num_key_value_heads", "head_dim", "attention_layers", "vocab_size"}  # fmt: skip
_MOE_FIELDS = {"experts": _INT, "top_k": _INT, "intermediate": _INT, "shared_experts": _INT,
               "shared_intermediate": _OPT_INT, "activation": _STR, "latent_size": _OPT_INT,
               "moe_layers": _OPT_INT, "scheme": _OPT_STR, "hash_layers": _INT}  # fmt: skip
_MLA_FIELDS = {"q_lora_rank": _OPT_INT, "kv_lora_rank": _INT, "qk_nope_head_dim": _INT,
               "qk_rope_head_dim": _INT, "v_head_dim": _INT}  # fmt: skip
_SCALARS = {"name": _STR, "slug": _STR, "model_type": _STR, "num_hidden_layers": _INT, "hidden_size": _INT,
            "num_attention_heads": _INT, "num_key_value_heads": _INT, "head_dim": _INT,
            "attention_layers": _INT, "quant": _STR, "vocab_size": _INT, "user_report_variant": _OPT_STR,
            "text_model_type": _OPT_STR, "vllm_text_architecture": _OPT_STR, "total_params": _OPT_STR,
            "active_params": _OPT_STR, "dense_intermediate": _OPT_INT, "mtp_layers": _OPT_INT,
            "quant_note": _OPT_STR, "max_context": _OPT_INT, "origin": _STR}  # fmt: skip
_REQUIRED = {"name", "slug", "model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
             "num_key_value_heads", "head_dim", "attention_layers", "quant", "vocab_size"}  # fmt: skip


def _scalar(where: str, key: str, value: Any, kind: str) -> Any:
    if value is None and kind.endswith("?"):
        return None
    if kind.startswith("int"):
        if type(value) is not int or (key in _POSITIVE and value <= 0):
            raise ValueError(f"{where}.{key}: expected {'a positive ' if key in _POSITIVE else 'an '}integer")
    elif not isinstance(value, str):
        raise ValueError(f"{where}.{key}: expected text")
    return value


def _scalars(where: str, raw: dict[str, Any], spec: dict[str, str], required: set[str]) -> dict[str, Any]:
    missing = sorted(required - raw.keys())
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    return {k: _scalar(where, k, raw[k], kind) for k, kind in spec.items() if k in raw}


def _only(where: str, raw: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object")
    extra = sorted(set(raw) - allowed)
    if extra:
        raise ValueError(f"{where}: unknown fields {extra}")
    return raw


def _texts(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{where}: expected a list of text")
    return tuple(value)


def _text_map(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{where}: expected an object of text")
    return dict(value)


def _quants(where: str, value: Any) -> tuple[str, ...]:
    out = _texts(where, value)
    bad = [q for q in out if q not in QUANTS]
    if bad:
        raise ValueError(f"{where}: unknown quant {bad[0]!r}; known: {', '.join(QUANTS)}")
    return out


def _routing_from_dict(where: str, raw: Any) -> Routing:
    raw = _only(where, raw, {"scoring_func", "renormalize", "num_expert_group", "has_e_score_bias"})
    group = raw.get("num_expert_group")
    if not isinstance(raw.get("scoring_func", "softmax"), str) or (
        group is not None and (type(group) is not int or group <= 0)
    ):
        raise ValueError(f"{where}: scoring_func is text, num_expert_group a positive integer or null")
    if any(type(raw.get(k, True)) is not bool for k in ("renormalize", "has_e_score_bias")):
        raise ValueError(f"{where}: renormalize / has_e_score_bias are true or false")
    return Routing(**raw)


def moe_shape_from_dict(where: str, raw: Any) -> MoeShape:
    raw = _only(where, raw, {*_MOE_FIELDS, "routing"})
    values = _scalars(where, raw, _MOE_FIELDS, {"experts", "top_k", "intermediate"})
    if values.get("activation", "silu") not in get_args(Activation):
        raise ValueError(f"{where}.activation: one of {', '.join(get_args(Activation))}")
    if values.get("scheme") is not None and values["scheme"] not in SCHEMES:
        raise ValueError(f"{where}.scheme: one of {', '.join(SCHEMES)}")
    if raw.get("routing") is not None:
        values["routing"] = _routing_from_dict(f"{where}.routing", raw["routing"])
    return MoeShape(**values)


def _quant_scheme_from_dict(where: str, raw: Any) -> QuantScheme:
    raw = _only(where, raw, {"method", "linear", "experts", "kv_cache"})
    if not all(raw.get(k) is None or isinstance(raw[k], str) for k in raw) or "linear" not in raw:
        raise ValueError(f"{where}: method / linear / experts / kv_cache are text (linear required)")
    return QuantScheme(**raw)


def _layer_fields(where: str, raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kinds = raw.get("attention_kinds") or []
    if not isinstance(kinds, list):
        raise ValueError(f"{where}.attention_kinds: expected a list")
    out["attention_kinds"] = tuple(
        attention_kind_from_dict(f"{where}.attention_kinds[{i}]", k) for i, k in enumerate(kinds)
    )
    mixers = raw.get("mixer_layers") or {}
    if not isinstance(mixers, dict) or not all(type(v) is int and v > 0 for v in mixers.values()):
        raise ValueError(f"{where}.mixer_layers: expected an object of positive integers")
    out["mixer_layers"] = tuple(sorted(mixers.items()))
    if raw.get("quant_scheme") is not None:
        out["quant_scheme"] = _quant_scheme_from_dict(f"{where}.quant_scheme", raw["quant_scheme"])
    return out


def mla_shape_from_dict(where: str, raw: Any) -> MlaShape:
    raw = _only(where, raw, set(_MLA_FIELDS))
    return MlaShape(**_scalars(where, raw, _MLA_FIELDS, set(_MLA_FIELDS)))


def _collections(where: str, raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("aliases", "architectures", "notes"):
        if key in raw:
            out[key] = _texts(f"{where}.{key}", raw[key])
    for key in ("field_status", "sources"):
        if key in raw:
            out[key] = _text_map(f"{where}.{key}", raw[key])
    if "hf_repo_ids" in raw:
        ids = raw["hf_repo_ids"]
        if not isinstance(ids, dict):
            raise ValueError(f"{where}.hf_repo_ids: expected an object")
        out["hf_repo_ids"] = {str(k): list(_texts(f"{where}.hf_repo_ids.{k}", v)) for k, v in ids.items()}
    if raw.get("hybrid") is not None:
        out["hybrid"] = dict(_only(f"{where}.hybrid", raw["hybrid"], set(raw["hybrid"])))
    if raw.get("moe") is not None:
        out["moe"] = moe_shape_from_dict(f"{where}.moe", raw["moe"])
    if raw.get("mla") is not None:
        out["mla"] = mla_shape_from_dict(f"{where}.mla", raw["mla"])
    if "quant_formats" in raw:
        out["quant_formats"] = _quants(f"{where}.quant_formats", raw["quant_formats"])
    return out | _layer_fields(where, raw)


_ALL_FIELDS = {f.name for f in fields(ModelProfile)}


def check_profile(p: ModelProfile) -> ModelProfile:
    """The cross-field rules of a profile (also for profiles derived from a config.json)."""
    if p.quant not in QUANTS:
        raise ValueError(f"{p.name}: unknown quant {p.quant!r}; known: {', '.join(QUANTS)}")
    if p.quant not in p.quant_formats and p.quant_formats:
        raise ValueError(f"{p.name}: default quant {p.quant} not in quant_formats")
    if p.moe and p.moe.top_k > p.moe.experts:
        raise ValueError(f"{p.name}: top_k {p.moe.top_k} > experts {p.moe.experts}")
    return p


def profile_from_dict(raw: Any) -> ModelProfile:
    """A profile from the parsed JSON of ``probe/data/models/<name>.json``; ValueError if malformed."""
    where = str(raw.get("name", "profile")) if isinstance(raw, dict) else "profile"
    raw = _only(where, raw, _ALL_FIELDS)
    values = _scalars(where, raw, _SCALARS, _REQUIRED) | _collections(where, raw)
    return check_profile(ModelProfile(**values))
