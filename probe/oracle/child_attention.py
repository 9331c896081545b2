"""Attention half of the oracle child: the platform's own selector, per backend and for ``auto``.

Runs only inside the sandboxed child (see :mod:`probe.oracle.child`).
"""

from __future__ import annotations

from typing import Any

from probe.oracle._child_base import (
    REFUSALS,
    TARGET,
    PlatformProxy,
    call,
    location,
    message,
    needs_gpu,
    raise_site,
    resolve,
)

_REASON_CHECKS: tuple[tuple[str, str], ...] = (
    ("head_size", "supports_head_size"),
    ("kv_cache_dtype", "supports_kv_cache_dtype"),
    ("dtype", "supports_dtype"),
    ("block_size", "supports_block_size"),
    ("non-MLA", "is_mla"),
    ("MLA not", "is_mla"),
    ("sinks", "supports_sink"),
    ("sparse", "is_sparse"),
    ("compute capability not supported", "supports_compute_capability"),
    ("attention type", "supports_attn_type"),
    ("sliding window", "supports_sliding_window"),
    ("R-SWA", "supports_rswa"),
    ("non-causal", "supports_non_causal"),
    ("partial multimodal", "supports_mm_prefix"),
    ("per-head quant", "supports_per_head_quant_scales"),
)


def reason_check(backend_cls: Any, reason: str) -> dict[str, Any]:
    """The backend method that produced ``reason`` (``supports_combination`` for free text)."""
    if reason.startswith(("ImportError", "OSError", "ModuleNotFoundError")):
        return {"reason": reason, "check": "import", "file": None, "line": None}
    method = next((m for key, m in _REASON_CHECKS if key in reason), "supports_combination")
    if backend_cls is None or not hasattr(backend_cls, method):
        return {"reason": reason, "check": method, "file": None, "line": None}
    file, line = location(getattr(backend_cls, method))
    return {"reason": reason, "check": f"{backend_cls.__name__}.{method}", "file": file, "line": line}


class AttentionOracle:
    def __init__(self, adapter: dict[str, Any]) -> None:
        self.cfg_cls = resolve(adapter["selector_config"])
        self.platform = PlatformProxy.impl
        self.priorities = resolve(adapter["priorities"])
        self.cap_cls = resolve(adapter["capability"])
        self.enum = resolve(adapter["backend_enum"])
        self.fa_version = resolve(adapter["fa_version"])

    def selector_config(self, q: dict[str, Any]) -> Any:
        import torch

        values = {
            "head_size": q["head_size"],
            "dtype": getattr(torch, q.get("dtype", "bfloat16")),
            "kv_cache_dtype": q.get("kv_cache_dtype", "auto"),
            "block_size": q.get("block_size"),
            "use_mla": q.get("use_mla", False),
            "has_sink": q.get("has_sink", False),
            "use_sparse": q.get("use_sparse", False),
            "attn_type": q.get("attn_type", "decoder"),
            "has_sliding_window": q.get("has_sliding_window", False),
        }
        return self.cfg_cls(**{k: v for k, v in values.items() if k in self.cfg_cls._fields})

    def candidates(self, q: dict[str, Any], sms: list[int]) -> list[str]:
        """Every backend the platform's priority lists name for this MLA-ness, any target."""
        names: list[str] = []
        for sm in sms:
            for mm_prefix in (False, True):
                prio = call(
                    self.priorities,
                    use_mla=q.get("use_mla", False),
                    device_capability=self.cap_cls(sm // 10, sm % 10),
                    num_heads=q.get("num_heads"),
                    kv_cache_dtype=q.get("kv_cache_dtype", "auto"),
                    head_size=q["head_size"],
                    use_mm_prefix=mm_prefix,
                )
                names += [b.name for b in prio if b.name not in names]
        return names

    def evaluate(self, q: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
        cfg = self.selector_config(q)
        cap = self.cap_cls(TARGET["major"], TARGET["minor"])
        prio = [
            b.name
            for b in call(
                self.priorities,
                use_mla=cfg.use_mla,
                device_capability=cap,
                num_heads=q.get("num_heads"),
                kv_cache_dtype=cfg.kv_cache_dtype,
                head_size=cfg.head_size,
            )
        ]
        out = [self._one(q, cfg, name, prio) for name in names]
        out.append(self._auto(q, cfg, prio))
        return out

    def _one(self, q: dict[str, Any], cfg: Any, name: str, prio: list[str]) -> dict[str, Any]:
        ans: dict[str, Any] = {
            "backend": name,
            "in_auto_order": name in prio,
            "auto_rank": prio.index(name) if name in prio else None,
        }
        backend = self.enum[name]
        try:
            self.platform.get_attn_backend_cls(backend, cfg, q.get("num_heads"))
        except REFUSALS as exc:
            ans.update(ok=None if needs_gpu(message(exc)) else False, message=message(exc))
            ans["reasons"] = self._reasons(backend, cfg)
            first = ans["reasons"][0] if ans["reasons"] else {}
            ans.update(file=first.get("file"), line=first.get("line"), check=first.get("check"))
            return ans
        ans["ok"] = True
        if name == "FLASH_ATTN":
            ans["fa_version"] = self._fa_version(cfg)
            ans["fa_support"] = fa_support()
            ans["fa_forced"] = self._fa_forced(q, cfg, backend)
        return ans

    def _fa_forced(self, q: dict[str, Any], cfg: Any, backend: Any) -> dict[str, Any] | None:
        """Per FlashAttention version, what vLLM does when the user forces it (``--attention-config
        '{"flash_attn_version": N}'``): the backend's own validation under that version (FA2 has no
        sinks, …) and the version it really runs (vLLM falls back, e.g. FA3 -> FA4 on Blackwell)."""
        try:
            attention_config = resolve("vllm.config:get_current_vllm_config")().attention_config
            before = attention_config.flash_attn_version
        except (*REFUSALS, AttributeError):
            return None
        out: dict[str, Any] = {}
        try:
            for v in (2, 3, 4):
                attention_config.flash_attn_version = v
                try:
                    self.platform.get_attn_backend_cls(backend, cfg, q.get("num_heads"))
                except REFUSALS as exc:
                    out[str(v)] = {"ok": False, "message": message(exc)}
                    continue
                out[str(v)] = {"ok": True, "runs": self._fa_version(cfg)}
        finally:
            attention_config.flash_attn_version = before
        return out

    def _reasons(self, backend: Any, cfg: Any) -> list[dict[str, Any]]:
        try:
            backend_cls = backend.get_class()
        except REFUSALS as exc:
            return [{"reason": f"{type(exc).__name__}: {exc}", "check": "import", "file": None, "line": None}]
        cap = self.cap_cls(TARGET["major"], TARGET["minor"])
        reasons = backend_cls.validate_configuration(device_capability=cap, **cfg._asdict())
        return [reason_check(backend_cls, r) for r in reasons]

    def _fa_version(self, cfg: Any) -> int | None:
        try:
            return call(self.fa_version, head_size=cfg.head_size, has_sinks=cfg.has_sink)
        except REFUSALS:
            return None

    def _auto(self, q: dict[str, Any], cfg: Any, prio: list[str]) -> dict[str, Any]:
        ans: dict[str, Any] = {"backend": "auto", "auto_order": prio}
        try:
            path = self.platform.get_attn_backend_cls(None, cfg, q.get("num_heads"))
        except REFUSALS as exc:
            file, line, func = raise_site(exc)
            ans.update(
                ok=None if needs_gpu(message(exc)) else False,
                message=message(exc),
                file=file,
                line=line,
                check=func,
            )
            return ans
        selected = next((b.name for b in self.enum if _safe_path(b) == path), str(path).rsplit(".", 1)[-1])
        ans.update(ok=True, selected=selected, selected_class=str(path))
        if selected == "FLASH_ATTN":
            ans["fa_version"] = self._fa_version(cfg)
        return ans


_FA_REASON = "vllm.vllm_flash_attn.flash_attn_interface:fa_version_unsupported_reason"


def fa_support() -> dict[str, str | None] | None:
    """Per FlashAttention version, why vLLM would refuse it on the target GPU (None: it accepts it),
    from vLLM's own ``fa_version_unsupported_reason`` under the faked capability. The version vLLM
    picks by default (``fa_version``) is a default, not a refusal of the others: a forced version
    is refused only for a reason given here. None: this vLLM has no such query."""
    try:
        reason = resolve(_FA_REASON)
    except REFUSALS:
        return None
    out: dict[str, str | None] = {}
    for v in (2, 3, 4):
        try:
            out[str(v)] = reason(v)
        except REFUSALS as exc:
            out[str(v)] = f"{type(exc).__name__}: {exc}"
    return out


def _safe_path(member: Any) -> str | None:
    try:
        return str(member.get_path())
    except (AttributeError, ValueError, TypeError):
        return None
