"""MoE half of the oracle child: each quant oracle's ``select_*_moe_backend``, per backend and ``auto``.

Runs only inside the sandboxed child (see :mod:`probe.oracle.child`). For one query (model shape,
quant, TP) it builds vLLM's ``FusedMoEConfig`` with ``moe_backend`` set to every ``--moe-backend``
value of this vLLM and to ``auto``, and calls the quant's oracle entry point with the weight /
activation quant keys its quant method passes (``probe.versions`` names them). A refusal is the
``ValueError`` / ``NotImplementedError`` the oracle raises, verbatim; the answer carries its raise
site and, for a kernel's own ``is_supported_config`` refusal, the experts class's ``_supports_*``
method that said no (file:line).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from collections.abc import Iterator
from typing import Any

from probe.oracle._child_base import REFUSALS, call, location, message, needs_gpu, raise_site, resolve

# "kernel does not support <X>" (FusedMoEExperts.is_supported_config) -> the method that checks X.
_KERNEL_CHECKS: tuple[tuple[str, str], ...] = (
    ("current device", "_supports_current_device"),
    ("no act_and_mul", "_supports_no_act_and_mul"),
    ("activation format", "activation_format"),
    ("activation", "_supports_activation"),
    ("quantization scheme", "_supports_quant_scheme"),
    ("parallel config", "_supports_parallel_config"),
    ("routing method", "_supports_routing_method"),
    ("router logits dtype", "_supports_router_logits_dtype"),
    ("hidden dim", "_supports_shape"),
    ("batch invariance", "_supports_batch_invariance"),
    ("LoRA", "supports_lora"),
    ("hash routing", "_supports_hash_routing"),
)


@contextlib.contextmanager
def _model_config_stub(wanted: bool) -> Iterator[None]:
    """Oracles that read ``get_current_vllm_config().model_config.quantization_config`` (a user
    override, e.g. MXFP4's activation) see a model config without one, as a checkpoint without
    overrides gives."""
    try:
        from vllm.config import get_current_vllm_config
    except ImportError:
        wanted = False
    if not wanted:
        yield
        return
    cfg = get_current_vllm_config()
    if getattr(cfg, "model_config", True) is not None:
        yield
        return
    cfg.model_config = types.SimpleNamespace(quantization_config=None, hf_config=None, is_diffusion=False)
    try:
        yield
    finally:
        cfg.model_config = None


class MoeOracle:
    def __init__(self, adapter: dict[str, Any]) -> None:
        self.adapter = adapter
        self.config_cls = resolve(adapter["config"])
        self.parallel_cls = resolve(adapter["parallel_config"])
        self.activation = resolve(adapter["activation"])
        self.backends = [str(b) for b in typing.get_args(resolve(adapter["backend_literal"]))]

    def routing_method(self, routing: dict[str, Any], top_k: int) -> Any:
        try:
            fn = resolve(self.adapter["routing_type"])
        except (ImportError, AttributeError):
            return resolve(self.adapter["routing_enum"])[routing.get("fallback", "Renormalize")]
        return call(
            fn,
            scoring_func=routing.get("scoring_func", "softmax"),
            top_k=top_k,
            renormalize=routing.get("renormalize", True),
            num_expert_group=routing.get("num_expert_group"),
            has_e_score_bias=routing.get("has_e_score_bias", False),
        )

    def moe_config(self, q: dict[str, Any], backend: str) -> Any:
        import torch

        parallel = self.parallel(q)
        values = {
            "num_experts": q["experts"],
            "experts_per_token": q["top_k"],
            "hidden_dim": q["hidden"],
            "intermediate_size": q["intermediate"],
            "num_local_experts": q["experts"] // max(1, parallel.ep_size if q.get("ep") else 1),
            "num_logical_experts": q["experts"],
            "activation": self.activation(q["activation"]),
            "device": "cuda",
            "routing_method": self.routing_method(q.get("routing", {}), q["top_k"]),
            "moe_parallel_config": parallel,
            "in_dtype": torch.bfloat16,
            "moe_backend": backend,
        }
        names = {f.name for f in dataclasses.fields(self.config_cls) if f.init}
        return self.config_cls(**{k: v for k, v in values.items() if k in names})

    def parallel(self, q: dict[str, Any]) -> Any:
        """vLLM's MoE parallel config: TP shards the widths; with ``ep`` the experts are sharded over
        tp x dp ranks instead (each holds whole widths; dp > 1 brings the all2all kernels)."""
        base = self.parallel_cls.make_no_parallel()
        if not q.get("ep"):
            return dataclasses.replace(base, tp_size=q["tp"])
        dp = int(q.get("dp") or 1)
        return dataclasses.replace(base, tp_size=1, dp_size=dp, ep_size=q["tp"] * dp, use_ep=True)

    def quant_args(self, quant: str, spec: dict[str, Any], cfg: Any) -> dict[str, Any]:
        """The keyword arguments the quant method's ``__init__`` passes to the oracle."""
        args: dict[str, Any] = dict(spec.get("kwargs", {}))
        if "weight_key" in spec:
            args["weight_key"] = resolve(spec["weight_key"])
        if "activation_key" in spec:
            args["activation_key"] = resolve(spec["activation_key"])
        if "weight_key_block" in spec:
            args["weight_key"] = self._block_key(spec, cfg)
        if "weight_key_gptq" in spec:
            wk = spec["weight_key_gptq"]
            args["weight_key"] = resolve(wk["quant_key"])(resolve(wk["scalar_type"]), resolve(wk["scale"]))
            qcfg = resolve("vllm.model_executor.layers.quantization:get_quantization_config")
            args["quant_config"] = qcfg(spec["quant_config_method"]).from_config(spec.get("hf_config", {}))
        return args

    def _block_key(self, spec: dict[str, Any], cfg: Any) -> Any:
        qutils = "vllm.model_executor.layers.quantization.utils.quant_utils"
        block = list(spec["weight_key_block"])
        try:
            resolver = resolve(spec["block_resolver"])
            block, _ = resolver(cfg, block, resolve(spec["activation_key"]), True)
        except (ImportError, AttributeError):
            pass
        group = resolve(f"{qutils}:GroupShape")(*block)
        return call(resolve(f"{qutils}:create_fp8_quant_key"), static=True, group_shape=group)

    def evaluate(self, q: dict[str, Any]) -> list[dict[str, Any]]:
        spec = dict(self.adapter["quants"].get(q["quant"]) or {})
        if not spec:
            return [{"backend": "auto", "ok": None, "message": f"no oracle entry for quant {q['quant']}"}]
        spec["hf_config"] = q.get("hf_quant_config") or {}
        try:
            select = resolve(spec["select"])
        except (ImportError, AttributeError) as exc:
            why = f"oracle entry {spec['select']} not in this vLLM: {type(exc).__name__}: {exc}"
            return [{"backend": "auto", "ok": None, "message": why}]
        return [self._one(q, spec, select, b) for b in [*(b for b in self.backends if b != "auto"), "auto"]]

    def _one(self, q: dict[str, Any], spec: dict[str, Any], select: Any, backend: str) -> dict[str, Any]:
        ans: dict[str, Any] = {"backend": backend}
        try:
            with _model_config_stub(q["quant"] == "mxfp4"):
                return self._ask(q, spec, select, backend, ans)
        except (AttributeError, TypeError, KeyError) as exc:  # the oracle itself could not ask
            ans.update(ok=None, message=f"oracle could not ask: {type(exc).__name__}: {exc}")
            return ans

    def _ask(
        self, q: dict[str, Any], spec: dict[str, Any], select: Any, backend: str, ans: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            cfg = self.moe_config(q, backend)
            chosen, experts = call(
                select, config=cfg, moe_config=cfg, **self.quant_args(q["quant"], spec, cfg)
            )
        except REFUSALS as exc:
            file, line, func = raise_site(exc)
            ans.update(
                ok=None if needs_gpu(message(exc)) else False,
                message=message(exc),
                file=file,
                line=line,
                check=func,
            )
            kernel = self._kernel_check(spec, backend, message(exc))
            if kernel:  # the experts class's own check is the better source; keep the raise site too
                ans["raised_at"] = f"{file}:{line} ({func})"
                ans.update(
                    file=kernel["file"],
                    line=kernel["line"],
                    check=kernel["check"],
                    experts_classes=kernel["classes"],
                )
            return ans
        ans.update(
            ok=True,
            selected=getattr(chosen, "name", str(chosen)),
            experts_class=getattr(experts, "__name__", None),
        )
        return ans

    def _kernel_check(self, spec: dict[str, Any], backend: str, text: str) -> dict[str, Any] | None:
        """For 'kernel does not support X': the experts class's method that checks X, with file:line."""
        if "kernel does not support" not in text or backend == "auto":
            return None
        what = text.split("kernel does not support", 1)[1]
        method = next((m for key, m in _KERNEL_CHECKS if key in what), None)
        try:
            mapped = resolve(spec["map"])(backend)
            classes: list[Any] = []
            for b in mapped if isinstance(mapped, list) else [mapped]:
                classes += list(resolve(spec["kernels"])(b))
        except (*REFUSALS, KeyError, AttributeError):
            return None
        if not classes or method is None:
            return None
        cls = classes[-1]  # the oracle reports the reason of the last class it tried
        file, line = location(getattr(cls, method, None))
        return {
            "check": f"{cls.__name__}.{method}",
            "file": file,
            "line": line,
            "classes": [c.__name__ for c in classes],
        }
