"""Field reports: to which requests a report applies, and how the answer says so.

A report in ``probe/data/reported.json`` carries ``applies``: the GPU (``gpu_sm``), the cell kind
and backend (+ FA version), the quant (``null``: any), a ``feature`` (profile facts that must match:
``head_dim``, ``attention_sinks``, ``mla``, ``tp``) and ``models`` — ``"any"`` when the failure is a
property of that GPU x backend x quant (it then applies to every model that matches, e.g. the
RTX PRO 6000 report of native-CUTLASS NVFP4 garbage applies to every NVFP4 model on sm_120), else
the models it was seen on. Cells read from matrices without ``applies`` keep the old rule: their
own model (or none) and shape.
"""

from __future__ import annotations

from typing import Any

from probe.recommend.types import EvidenceCell, Request

FEATURES = ("head_dim", "attention_sinks", "mla", "tp")


def feature_value(req: Request, name: str) -> Any:
    """The request's value of a report feature."""
    p = req.profile
    if name == "head_dim":
        return p.head_dim
    if name == "attention_sinks":
        return bool((p.hybrid or {}).get("attention_sinks"))
    if name == "mla":
        return req.mla
    return req.tp or 1  # "tp"


def applies(c: EvidenceCell, req: Request) -> bool:
    """A report with ``applies`` that concerns this request (GPU, quant, feature, model)."""
    a = c.get("applies") or {}
    if a.get("gpu_sm") not in (None, req.sm):
        return False
    if a.get("quant") not in (None, req.quant) and c.kind != "attention":
        return False
    if any(feature_value(req, k) != v for k, v in (a.get("feature") or {}).items()):
        return False
    models = a.get("models", "any")
    return models == "any" or any(req.is_model(m) for m in models)


def scope(c: EvidenceCell, req: Request) -> str | None:
    """How a field report reaches this request ('reported on Qwen3.5-397B-A17B, applies by GPU x
    backend x quant'), or None for a report on this very model (or a cell without ``applies``)."""
    a = c.get("applies")
    if not a or a.get("models", "any") != "any":
        return None
    seen_on = c.get("model")
    if seen_on and req.is_model(seen_on):
        return None
    keys = ["GPU", "backend"] + (["quant"] if a.get("quant") else []) + sorted(a.get("feature") or {})
    where = f"reported on {seen_on}" if seen_on else f"reported for sm_{a.get('gpu_sm')}"
    return f"{where}, applies by {' x '.join(keys)}"


def relevant(c: EvidenceCell, req: Request) -> bool:
    """A report (with ``applies``) of a MoE / attention / engine cell that concerns this request."""
    if c.kind == "engine":
        return applies(c, req) and (req.tp is None or c.get("tp") in (None, req.tp))
    return applies(c, req)
