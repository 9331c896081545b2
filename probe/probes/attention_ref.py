"""The float32 attention reference of the attention probes (numpy: the same code runs in tests without a GPU).

Causal attention of one request's new queries over all of its keys so far, with grouped-query heads
(query head ``h`` reads KV head ``h // (H / KV)``), optional attention sinks (gpt-oss: one learned
logit per head that joins the softmax denominator and attends to nothing) and an optional sliding
window (a query at position ``p`` sees keys ``p - window + 1 .. p``, as vLLM's ``sliding_window``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

ATTENTION_TOLERANCE = 0.02  # relative L2 error, bf16 inputs, float32 reference


def reference_attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    q_start: int,
    scale: float,
    sinks: Any = None,
    sliding_window: int | None = None,
    causal: bool = True,
) -> np.ndarray:
    """q: (Q, H, D); k, v: (S, KV, D); query i sits at absolute position ``q_start + i``. -> (Q, H, D)."""
    q, k, v = (np.asarray(x, dtype=np.float32) for x in (q, k, v))
    n_q, heads, _ = q.shape
    n_k, kv_heads, _ = k.shape
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads are not a multiple of {kv_heads} KV heads")
    rep = heads // kv_heads
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    logits = np.einsum("qhd,khd->hqk", q, k, optimize=True) * np.float32(scale)
    pos_q = np.arange(q_start, q_start + n_q)[:, None]
    pos_k = np.arange(n_k)[None, :]
    visible = pos_k <= pos_q if causal else np.ones((n_q, n_k), dtype=bool)
    if sliding_window:
        visible = visible & (pos_k > pos_q - sliding_window)
    logits = np.where(visible[None], logits, -np.inf)
    top = logits.max(axis=-1, keepdims=True)
    if sinks is not None:
        sink = np.asarray(sinks, dtype=np.float32).reshape(heads, 1, 1)
        top = np.maximum(top, sink)
    weights = np.exp(logits - top)
    denom = weights.sum(axis=-1, keepdims=True)
    if sinks is not None:
        denom = denom + np.exp(sink - top)
    out = np.einsum("hqk,khd->qhd", weights / denom, v, optimize=True)
    return np.asarray(out, dtype=np.float32)


def relative_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64 (inf when ``out`` is not finite)."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if not np.isfinite(o).all():
        return float("inf")
    return float(np.linalg.norm(o - r) / max(float(np.linalg.norm(r)), 1e-12))
