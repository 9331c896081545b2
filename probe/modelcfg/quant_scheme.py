"""A checkpoint's quantization as vLLM loads it, read from ``config.json`` (and ModelOpt's
``hf_quant_config.json``) without vLLM: the quant method vLLM resolves, the scheme of the linear
layers, the routed experts' own scheme, and a declared KV-cache quant.

vLLM's rules followed here (vllm/transformers_utils/config.py ``get_config``,
model_arch_config_convertor.py ``_normalize_quantization_config``, config/model.py
``_verify_quantization`` and each method's ``override_quantization_method``):

* ``quantization_config`` of the config (its ``text_config`` for multimodal models); only when the
  config has none, ``hf_quant_config.json`` beside it (older ModelOpt exports);
* a ModelOpt export is recognised by ``producer.name == "modelopt"`` (or a legacy
  ``modelopt_quant_config``) or by ``quant_method: modelopt``; its ``quant_algo`` picks ``modelopt``
  (FP8), ``modelopt_fp4`` (NVFP4) or ``modelopt_mixed`` (MIXED_PRECISION, per-layer algorithms in
  ``quantized_layers``); without either marker the file is not read as quantized;
* ``mxfp4`` on a gpt-oss model is ``gpt_oss_mxfp4``; ``fp8`` on DeepSeek-V4 is ``deepseek_v4_fp8``
  (its routed experts in FP4 per ``expert_dtype``);
* experts listed in ``modules_to_not_convert`` / ``ignore`` / ``exclude_modules`` stay unquantized.
"""

from __future__ import annotations

import re
from typing import Any

from probe.catalog.layer_kinds import QuantScheme

_MODELOPT_METHOD = {"FP8": "modelopt", "FP8_PER_CHANNEL_PER_TOKEN": "modelopt", "FP8_PB_WO": "modelopt",
                    "NVFP4": "modelopt_fp4", "MIXED_PRECISION": "modelopt_mixed"}  # fmt: skip
_ALGO_SCHEME = {"FP8": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8", "FP8_PB_WO": "fp8_block", "NVFP4": "nvfp4",
                "W4A16_NVFP4": "nvfp4_w4a16", "MXFP8": "mxfp8", "W4A16_AWQ": "int4_w4a16",
                "W4A8_AWQ": "int4_w4a16"}  # fmt: skip
_INT4_METHODS = (
    "gptq",
    "awq",
    "gptq_marlin",
    "awq_marlin",
    "moe_wna16",
    "auto-round",
    "auto_gptq",
    "auto_awq",
)
# the routed experts' module path in the model families probe knows (a representative layer index is
# substituted for N); an exclusion pattern that matches one of them leaves the experts unquantized
_EXPERT_PATHS = ("model.layers.N.mlp.experts", "model.language_model.layers.N.mlp.experts",
                 "backbone.layers.N.mixer.experts", "model.layers.N.block_sparse_moe.experts",
                 "model.layers.N.ffn.experts", "model.layers.N.experts",
                 "model.language_model.layers.N.experts")  # fmt: skip


def _normalized_method(qc: dict[str, Any]) -> str:
    """``quant_method`` after vLLM's normalisation: an hf_quant_config-style ModelOpt export (its
    ``quantization`` section, marked by ``producer.name == "modelopt"`` or a legacy
    ``modelopt_quant_config``) gets the method its ``quant_algo`` names."""
    inner = qc.get("quantization")
    producer: dict[str, Any] = qc["producer"] if isinstance(qc.get("producer"), dict) else {}
    legacy = isinstance(inner, dict) and "modelopt_quant_config" in inner
    if (producer.get("name") == "modelopt" or legacy) and isinstance(inner, dict) and inner.get("quant_algo"):
        return _MODELOPT_METHOD.get(str(inner["quant_algo"]).upper(), "modelopt")
    return str(qc.get("quant_method", "")).lower().replace("compressed_tensors", "compressed-tensors")


def _modelopt_algo(qc: dict[str, Any], method: str) -> str | None:
    """ModelOpt's ``quant_algo`` (``quantization.quant_algo`` or flat) when the method is a ModelOpt one."""
    if not method.startswith("modelopt"):
        return None
    inner = qc.get("quantization")
    algo = (inner if isinstance(inner, dict) else qc).get("quant_algo")
    return str(algo).upper() if algo is not None else None


def resolve_method(qc: dict[str, Any] | None, model_type: str, architecture: str = "") -> str | None:
    """The vLLM quant method ``qc`` resolves to (None: unquantized): normalisation, then the
    per-architecture config hooks (vllm/model_executor/models/config.py), then the overrides."""
    if not qc:
        return None
    method = _normalized_method(qc)
    kimi_k3_mxfp4 = architecture.startswith("KimiK3") and qc.get("format") == "mxfp4-pack-quantized"
    if kimi_k3_mxfp4 and method == "compressed-tensors":  # vLLM's KimiK3 config hook rewrites it
        method = "mxfp4"
    algo = _modelopt_algo(qc, method)
    if algo is not None:
        if algo == "FP8":
            method = "modelopt"
        elif "FP4" in algo:
            method = "modelopt_fp4"
        elif algo == "MIXED_PRECISION":
            method = "modelopt_mixed"
    if model_type == "deepseek_v4" and method in ("fp8", "deepseek_v4_fp8"):
        return "deepseek_v4_fp8"
    if method in ("mxfp4", "gpt_oss_mxfp4"):
        return "gpt_oss_mxfp4" if model_type == "gpt_oss" else "mxfp4"
    return method or None


def _excluded_lists(qc: dict[str, Any], hf_quant: dict[str, Any] | None) -> list[str]:
    names: list[str] = []
    for src in (qc, qc.get("quantization"), (hf_quant or {}).get("quantization")):
        if isinstance(src, dict):
            for key in ("modules_to_not_convert", "ignore", "exclude_modules", "ignored_layers"):
                if isinstance(src.get(key), list):
                    names += [str(x) for x in src[key]]
    return names


def experts_excluded(patterns: list[str], moe_layer: int) -> bool:
    """Whether an exclusion list (names, ``*`` patterns or ``re:`` regexes) names the routed experts."""
    import fnmatch  # only for lists that name experts at all

    candidates = [p.replace("N", str(moe_layer)) for p in _EXPERT_PATHS]
    for pat in (p for p in patterns if "expert" in p and "shared_expert" not in p):
        if pat.startswith("re:"):
            hit = any(re.fullmatch(pat[3:], c) for c in candidates)
        else:
            hit = any(fnmatch.fnmatchcase(c, pat) or c == pat.rstrip(".") for c in candidates)
        if hit:
            return True
    return False


def _group_scheme(group: dict[str, Any], fmt: str) -> str:
    """A compressed-tensors config group's scheme (weights / input activations / format)."""
    w = group.get("weights") or {}
    acts = group.get("input_activations")
    fmt = str(group.get("format") or fmt or "").lower()
    if "nvfp4" in fmt:
        return "nvfp4" if acts else "nvfp4_w4a16"
    if "mxfp4" in fmt:
        return "mxfp4"
    if w.get("type") == "float" and w.get("num_bits") == 8:
        return "fp8_block" if w.get("strategy") == "block" or w.get("block_structure") else "fp8"
    if w.get("num_bits") == 4:
        return "int4_w4a16"
    return "bf16"


def _targets_experts(targets: list[Any], moe_layer: int) -> bool:
    """A compressed-tensors group's ``targets`` cover the routed experts: the ``Linear`` class (vLLM
    applies it to FusedMoE layers too), or a name / ``re:`` pattern matching the experts module."""
    candidates = [p.replace("N", str(moe_layer)) for p in _EXPERT_PATHS]
    for t in (str(x) for x in targets):
        if t == "Linear" or t in candidates:
            return True
        if t.startswith("re:") and any(re.fullmatch(t[3:], c) for c in candidates):
            return True
    return False


def _ct_schemes(qc: dict[str, Any], moe_layer: int) -> tuple[str, str]:
    """(linear, experts) of a compressed-tensors config: the group covering ``Linear`` / the experts."""
    groups = [g for g in (qc.get("config_groups") or {}).values() if isinstance(g, dict)]
    fmt = str(qc.get("format") or "")
    if not groups:
        return "bf16", "bf16"
    experts = next((g for g in groups if _targets_experts(g.get("targets") or [], moe_layer)), None)
    linear = next((g for g in groups if "Linear" in (g.get("targets") or [])), groups[0])
    return _group_scheme(linear, fmt), _group_scheme(experts, fmt) if experts else "bf16"


def _mixed_schemes(qc: dict[str, Any], hf_quant: dict[str, Any] | None) -> tuple[str, str]:
    """(linear, experts) of a ModelOpt MIXED_PRECISION export, from its ``quantized_layers`` map."""
    layers = qc.get("quantized_layers") or ((hf_quant or {}).get("quantization") or {}).get(
        "quantized_layers"
    )
    if not isinstance(layers, dict):
        return "bf16", "bf16"
    algos = {
        str(k): str((v or {}).get("quant_algo", "")).upper() for k, v in layers.items() if isinstance(v, dict)
    }
    expert = [a for k, a in algos.items() if ".experts" in k and "shared" not in k]
    linear = [a for k, a in algos.items() if ("attn" in k or "proj" in k) and ".experts" not in k]

    def common(values: list[str]) -> str:
        return _ALGO_SCHEME.get(max(set(values), key=values.count), "bf16") if values else "bf16"

    return common(linear), common(expert)


def _schemes(
    method: str | None,
    qc: dict[str, Any],
    hf_quant: dict[str, Any] | None,
    cfg: dict[str, Any],
    moe_layer: int,
) -> tuple[str, str]:
    """(linear, experts) before exclusions."""
    if method is None:
        return "bf16", "bf16"
    if method == "modelopt_mixed":
        return _mixed_schemes(qc, hf_quant)
    if method == "compressed-tensors":
        return _ct_schemes(qc, moe_layer)
    if method in ("gpt_oss_mxfp4", "mxfp4"):
        return "bf16", "mxfp4"
    if method == "deepseek_v4_fp8":
        if str(qc.get("quant_algo", "")).upper() == "MIXED_PRECISION":
            return "fp8_block", _mixed_schemes(qc, hf_quant)[1]
        return "fp8_block", "mxfp4" if str(cfg.get("expert_dtype", "")).lower() == "fp4" else "fp8_block"
    if method.startswith("modelopt"):
        scheme = _ALGO_SCHEME.get(_modelopt_algo(qc, method) or "", "bf16")
        return scheme, scheme
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8"):
        scheme = "fp8_block" if qc.get("weight_block_size") else "fp8"
        return scheme, scheme
    if method in _INT4_METHODS:
        return "int4_w4a16", "int4_w4a16"
    return method, method


def _kv_cache(qc: dict[str, Any]) -> str | None:
    inner: dict[str, Any] = qc["quantization"] if isinstance(qc.get("quantization"), dict) else {}
    algo = qc.get("kv_cache_quant_algo") or inner.get("kv_cache_quant_algo")
    if algo:
        return str(algo).lower()
    return "fp8" if qc.get("kv_cache_scheme") else None


def read_quant(
    config: dict[str, Any], text: dict[str, Any] | None, hf_quant: dict[str, Any] | None, first_moe_layer: int
) -> QuantScheme:
    """The checkpoint's :class:`QuantScheme` (see the module docstring for vLLM's rules)."""
    qc = config.get("quantization_config") or config.get("compression_config")
    if qc is None and text:
        qc = text.get("quantization_config")
    if qc is None and isinstance(hf_quant, dict):
        qc = hf_quant
    if not isinstance(qc, dict):
        qc = {}
    cfg = {**config, **(text or {})}
    archs = config.get("architectures") or [""]
    method = resolve_method(qc, str(config.get("model_type") or ""), str(archs[0]))
    linear, experts = _schemes(method, qc, hf_quant if qc is not hf_quant else None, cfg, first_moe_layer)
    if experts != "bf16" and experts_excluded(_excluded_lists(qc, hf_quant), first_moe_layer):
        experts = "bf16"
    return QuantScheme(
        method=method, linear=linear, experts=experts, kv_cache=_kv_cache(qc) if method else None
    )
