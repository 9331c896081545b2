"""The oracle child's model reader: a config.json read the way vLLM itself reads it.

``python -m probe.oracle.child_model < request.json`` runs inside the image's Python (standard
library at import time, vLLM / torch lazily, the target GPU faked as in :mod:`probe.oracle.child`).
The request is ``{"configs": [folder or config.json, ...], "sm": 90}``; the answer, one JSON line,
is ``{"versions": {...}, "readings": [{"path", "spec" | "error", "config": {...}}]}``.

Per config it builds vLLM's own ``ModelConfig`` (``get_config`` with the text config of multimodal
models, the ModelOpt ``hf_quant_config.json`` beside it, the quant method vLLM picks, the model
registry's architecture) and then the model itself on PyTorch's ``meta`` device — no weights, no
GPU — and reads every layer vLLM built:

* each attention layer (``AttentionLayerBase`` with a KV cache): head size, heads, KV heads, sliding
  window, sinks, MLA, sparse (an indexer): exactly what that layer handed ``get_attn_backend``;
* each Mamba / linear-attention / GDN layer by its ``mamba_type``;
* each routed-experts layer's ``FusedMoEConfig`` (experts, top-k, hidden, intermediate, activation,
  routing inputs) and its quant method (the experts' own scheme, which can differ from the model's).

The spec's shape is the one :func:`probe.modelcfg.layer_spec.layer_spec` gives for the fast reader, so the
two readings compare field by field (``tests/catalog/test_vllm_reading.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# vLLM's quant-method classes of routed experts -> probe's scheme names (see probe.catalog.layer_kinds)
_MOE_METHOD_SCHEME = {
    "UnquantizedFusedMoEMethod": "bf16",
    "ModelOptFp8MoEMethod": "fp8",
    "ModelOptMxFp8FusedMoE": "mxfp8",
    "Mxfp4MoEMethod": "mxfp4",
    "GptOssMxfp4MoEMethod": "mxfp4",
    "CompressedTensorsW4A4Nvfp4MoEMethod": "nvfp4",
    "CompressedTensorsW4A4Mxfp4MoEMethod": "mxfp4",
    "CompressedTensorsMxfp4MoEMethod": "mxfp4",
    "CompressedTensorsW8A8Fp8MoEMethod": "fp8",
    "CompressedTensorsWNA16MarlinMoEMethod": "int4_w4a16",
    "CompressedTensorsWNA16MoEMethod": "int4_w4a16",
    "GPTQMarlinMoEMethod": "int4_w4a16",
    "AWQMarlinMoEMethod": "int4_w4a16",
    "MoeWNA16Method": "int4_w4a16",
}


def moe_scheme(method: Any) -> str:
    """The routed experts' quant scheme from the quant method object vLLM gave their layer."""
    name = type(method).__name__
    if name == "ModelOptNvFp4FusedMoE":
        return "nvfp4_w4a16" if getattr(method, "use_a16", False) else "nvfp4"
    if name in ("Fp8MoEMethod", "DeepSeekV4Fp8MoEMethod"):
        return "fp8_block" if getattr(method, "block_quant", False) else "fp8"
    if name == "CompressedTensorsW8A8Fp8MoEMethod" and getattr(method, "block_quant", False):
        return "fp8_block"
    return _MOE_METHOD_SCHEME.get(name, f"other:{name}")


def _sliding(m: Any) -> int | None:
    window = getattr(m, "sliding_window", None)
    if isinstance(window, (list, tuple)):  # (left, right) in some versions
        window = window[0]
    return int(window) if isinstance(window, int) and window > 0 else None


def attention_kind(m: Any) -> dict[str, Any]:
    """One attention layer as vLLM's selector sees it (``get_attn_backend``'s inputs)."""
    mla = hasattr(m, "kv_lora_rank")
    sparse = bool(getattr(m, "use_sparse", False) or getattr(m, "indexer", None) is not None)
    return {
        "head_size": int(m.head_size),
        "num_heads": int(m.num_heads),
        "num_kv_heads": 1 if mla else int(m.num_kv_heads),
        "sliding_window": _sliding(m),
        "sink": bool(getattr(m, "has_sink", False)),
        "mla": mla,
        "sparse": sparse and mla,
        "chunked": type(m).__name__ == "ChunkedLocalAttention",
    }


def _mixer_kind(m: Any) -> str:
    kind = getattr(m, "mamba_type", None)
    kind = getattr(kind, "name", kind)
    return str(kind or type(m).__name__).lower()


def _base_layer_class(m: Any, base: type) -> str:
    """The most general class of ``m`` below vLLM's ``AttentionLayerBase`` (GPU-specific subclasses of
    one attention implementation read as the same kind)."""
    names = [
        c.__name__ for c in type(m).__mro__ if isinstance(c, type) and issubclass(c, base) and c is not base
    ]
    return names[-1] if names else type(m).__name__


def layer_kinds(model: Any) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(distinct attention kinds with their layer counts, counts of the layers without a KV cache
    of their own choosing: Mamba / GDN / linear attention by ``mamba_type``, and attention layers
    that bypass the generic selector as ``custom:<class>``). KV / index caches that belong to an
    attention layer (``*Cache`` modules) are not layers of their own."""
    try:
        from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    except ImportError:
        from vllm.attention.layer import AttentionLayerBase
    kinds: Counter[str] = Counter()
    mixers: Counter[str] = Counter()
    for _, m in model.named_modules():
        if not isinstance(m, AttentionLayerBase) or type(m).__name__.endswith("Cache"):
            continue
        if hasattr(m, "mamba_type"):
            mixers[_mixer_kind(m)] += 1
        elif hasattr(m, "head_size") and hasattr(m, "num_heads"):
            kinds[json.dumps(attention_kind(m), sort_keys=True)] += 1
        else:
            mixers[f"custom:{_base_layer_class(m, AttentionLayerBase)}"] += 1
    out = [{**json.loads(k), "layers": n} for k, n in kinds.items()]
    return sorted(out, key=lambda k: (-k["layers"], k["head_size"], k["num_heads"])), dict(
        sorted(mixers.items())
    )


def _routing(layer: Any) -> dict[str, Any]:
    return {
        "scoring_func": str(getattr(layer, "scoring_func", "softmax") or "softmax"),
        "renormalize": bool(getattr(layer, "renormalize", True)),
        "num_expert_group": getattr(layer, "num_expert_group", None)
        if getattr(layer, "use_grouped_topk", False)
        else None,
        "has_e_score_bias": getattr(layer, "e_score_correction_bias", None) is not None,
    }


def moe_kind(layer: Any) -> dict[str, Any]:
    cfg = layer.moe_config
    act = getattr(cfg.activation, "value", cfg.activation)
    is_gated = getattr(cfg.activation, "is_gated", None)
    return {
        "experts": int(cfg.num_experts),
        "top_k": int(cfg.experts_per_token),
        "hidden": int(getattr(cfg, "hidden_dim_unpadded", None) or cfg.hidden_dim),
        "intermediate": int(
            getattr(cfg, "intermediate_size_per_partition_unpadded", None) or cfg.intermediate_size
        ),
        "activation": str(act),
        "gated": bool(is_gated if is_gated is not None else getattr(cfg, "is_act_and_mul", True)),
        "routing": _routing(layer),
        "routing_method": str(getattr(cfg.routing_method, "name", cfg.routing_method)),
        "scheme": moe_scheme(getattr(layer, "quant_method", None)),
    }


def moe_kinds(model: Any) -> list[dict[str, Any]]:
    """Distinct routed-experts layers (with counts): modules holding a ``moe_config`` and a quant method."""
    seen: Counter[str] = Counter()
    for _, m in model.named_modules():
        if hasattr(m, "moe_config") and hasattr(m, "quant_method") and hasattr(m, "global_num_experts"):
            seen[json.dumps(moe_kind(m), sort_keys=True)] += 1
    return [{**json.loads(k), "layers": n} for k, n in seen.items()]


def config_facts(mc: Any) -> dict[str, Any]:
    """What vLLM's ModelConfig says before any layer is built."""
    text = mc.hf_text_config
    facts: dict[str, Any] = {
        "architecture": mc.architectures[0] if mc.architectures else None,
        "model_type": getattr(mc.hf_config, "model_type", None),
        "text_model_type": getattr(text, "model_type", None),
        "head_size": mc.get_head_size(),
        "total_num_kv_heads": mc.get_total_num_kv_heads(),
        "use_mla": bool(mc.use_mla),
        "sliding_window": mc.get_sliding_window(),
        "is_hybrid": bool(getattr(mc, "is_hybrid", False)),
        "quant_method": mc.quantization,
        "num_hidden_layers": mc.get_total_num_hidden_layers(),
    }
    try:
        facts["registered"] = bool(mc.registry.is_text_generation_model(mc.architectures, mc))
    except Exception as exc:
        facts["registered"] = f"{type(exc).__name__}: {exc}"
    return facts


def _model_config(path: str) -> Any:
    from vllm.config import ModelConfig

    return ModelConfig(
        model=path,
        tokenizer=path,
        skip_tokenizer_init=True,
        enforce_eager=True,
        trust_remote_code=False,
        max_model_len=4096,
    )


class _NoStream:
    """Stands in for ``torch.cuda.Stream`` / ``Event`` while layers are built (no driver here)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _device_properties(device: Any = None) -> Any:
    """What a layer asks of the (absent) GPU while it is built: the target's capability, an H100's
    SM count and memory (sizes of scratch buffers only; they do not change the layer's kind)."""
    import types

    from probe.oracle._child_base import TARGET

    return types.SimpleNamespace(
        major=TARGET["major"],
        minor=TARGET["minor"],
        name=str(TARGET["name"]),
        multi_processor_count=132,
        total_memory=80 * 2**30,
        L2_cache_size=50 * 2**20,
        warp_size=32,
    )


@contextlib.contextmanager
def _no_driver() -> Iterator[None]:
    """Layer constructors that ask the CUDA runtime for a device index or a side stream get a
    placeholder: the shapes and kinds vLLM builds do not depend on them, and there is no GPU."""
    import torch

    names = ("current_device", "Stream", "Event", "set_stream", "get_device_properties")
    saved = {k: getattr(torch.cuda, k) for k in names}
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_properties = _device_properties
    torch.cuda.Stream = _NoStream
    torch.cuda.Event = _NoStream
    torch.cuda.set_stream = lambda *a, **k: None
    try:
        yield
    finally:
        for key, value in saved.items():
            setattr(torch.cuda, key, value)


def build_meta_model(mc: Any) -> Any:
    """vLLM's model for ``mc`` on the meta device (every layer's __init__ runs; no memory, no GPU)."""
    import torch
    from vllm.config import LoadConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model

    vllm_config = VllmConfig(model_config=mc, load_config=LoadConfig(load_format="dummy"))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(mc.dtype)  # as vLLM's loaders do: layers pick backends for this dtype
    try:
        with set_current_vllm_config(vllm_config), torch.device("meta"), _no_driver(), _cuda_as_meta():
            return initialize_model(vllm_config=vllm_config)
    finally:
        torch.set_default_dtype(previous)


def _is_cuda(device: Any) -> bool:
    if isinstance(device, int) and not isinstance(device, bool):
        return True
    return str(getattr(device, "type", device)).startswith("cuda")


def _cuda_as_meta() -> Any:
    """A torch function mode that turns every tensor a layer puts on the GPU (``device="cuda"``,
    ``.cuda()``, ``.to("cuda")``: buffers such as top-k index scratch) into a meta tensor."""
    import torch
    from torch.overrides import TorchFunctionMode

    class CudaAsMeta(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                return args[0]
            if _is_cuda(kwargs.get("device")):
                kwargs["device"] = "meta"
            if func is torch.Tensor.to:
                args = tuple("meta" if i and _is_cuda(a) else a for i, a in enumerate(args))
            return func(*args, **kwargs)

    return CudaAsMeta()


def read_one(path: str) -> dict[str, Any]:
    out: dict[str, Any] = {"path": path}
    try:
        mc = _model_config(path)
        out["config"] = config_facts(mc)
        model = build_meta_model(mc)
        attention, mixers = layer_kinds(model)
        out["spec"] = {"attention": attention, "mixers": mixers, "moe": moe_kinds(model)}
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        out["traceback"] = traceback.format_exc()[-2000:]
    return out


def _init_single_process() -> None:
    """A world of one rank (gloo), as vLLM's model code asks its TP / PP group while building layers."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    handle, name = tempfile.mkstemp(prefix="probe-model-dist-")
    os.close(handle)
    Path(name).unlink()  # the file store of torch.distributed creates it
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{name}", backend="gloo"
        )
        initialize_model_parallel(1, 1)
    try:  # the model runner sets up scratch space before it builds a model (sparse MLA asks for it)
        import torch
        from vllm.v1.worker.workspace import init_workspace_manager
    except ImportError:
        return
    init_workspace_manager(torch.device("meta"))


def read_all(request: dict[str, Any]) -> dict[str, Any]:
    from probe.oracle._child_base import install_platform, set_target

    install_platform()
    sm = int(request.get("sm", 100))
    set_target({"sm": sm, "name": request.get("gpu_name") or f"sm_{sm}"})
    import vllm

    _init_single_process()
    readings = []
    for path in request.get("configs", []):
        t0 = time.monotonic()
        reading = read_one(str(Path(path)))
        reading["wall_s"] = round(time.monotonic() - t0, 2)
        readings.append(reading)
    return {"vllm": str(getattr(vllm, "__version__", "")), "sm": sm, "readings": readings}


def main() -> int:
    logging.disable(logging.WARNING)
    if os.environ.get("PROBE_ORACLE_LAZY") == "1":  # stub libcuda (no driver here): bind lazily
        sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
    request = json.load(sys.stdin)
    try:
        out = read_all(request)
    except Exception as exc:
        out = {"skipped": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
