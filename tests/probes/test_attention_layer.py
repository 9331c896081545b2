"""The attention-layer probe: its float32 reference, paged layout, metadata filling and refusals (CPU),
plus a GPU run against real vLLM (skipped without torch + CUDA + vLLM)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import numpy as np
import pytest

from probe.probes import attention_layer as al
from probe.probes import attention_paged as ap
from probe.probes.attention_ref import reference_attention, relative_error


def _naive(q, k, v, q_start, scale, sinks=None, window=None, causal=True):
    """Loop-by-loop attention (the definition), to check the vectorized reference against."""
    n_q, heads, _ = q.shape
    rep = heads // k.shape[1]
    out = np.zeros((n_q, heads, v.shape[2]))
    for i in range(n_q):
        p = q_start + i
        for h in range(heads):
            keys = [j for j in range(k.shape[0]) if (not causal or j <= p) and (not window or j > p - window)]
            logits = [float(q[i, h] @ k[j, h // rep]) * scale for j in keys]
            terms = [*logits, float(sinks[h])] if sinks is not None else logits
            m = max(terms)
            z = sum(math.exp(t - m) for t in terms)
            for j, lg in zip(keys, logits, strict=True):
                out[i, h] += math.exp(lg - m) / z * v[j, h // rep]
    return out


@pytest.mark.parametrize(
    ("sinks", "window", "causal"),
    [(False, None, True), (True, None, True), (False, 5, True), (True, 3, False)],
)
def test_reference_matches_the_definition(sinks, window, causal):
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(4, 8, 16)), rng.normal(size=(11, 2, 16)), rng.normal(size=(11, 2, 16))
    s = rng.normal(size=8) if sinks else None
    got = reference_attention(q, k, v, q_start=7, scale=0.25, sinks=s, sliding_window=window, causal=causal)
    want = _naive(q, k, v, 7, 0.25, s, window, causal)
    assert got.shape == (4, 8, 16)
    assert relative_error(got, want) < 1e-5


def test_reference_properties():
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(3, 4, 8)), rng.normal(size=(3, 4, 8)), rng.normal(size=(3, 4, 8))
    out = reference_attention(q, k, v, q_start=0, scale=1.0)
    assert np.allclose(out[0], v[0])  # the first token sees only itself
    # a huge sink takes all the probability mass: the output goes to zero
    assert np.abs(reference_attention(q, k, v, q_start=0, scale=1.0, sinks=np.full(4, 50.0))).max() < 1e-12
    # causal and non-causal differ (the probe's negative control relies on it)
    assert relative_error(out, reference_attention(q, k, v, q_start=0, scale=1.0, causal=False)) > 0.1
    with pytest.raises(ValueError, match="not a multiple"):
        reference_attention(q, k[:, :3], v[:, :3], q_start=0, scale=1.0)
    assert relative_error(np.array([np.nan]), np.array([1.0])) == math.inf


def test_paged_layout_is_a_shuffled_partition_without_the_null_block():
    tables = ap.paged_layout([96, 17, 160, 33], max_len=180, block_size=16, seed=3)
    per_req = -(-180 // 16)
    assert [len(t) for t in tables] == [per_req] * 4
    flat = sorted(b for t in tables for b in t)
    assert flat == list(range(1, 1 + 4 * per_req))
    assert tables != [list(range(1 + i * per_req, 1 + (i + 1) * per_req)) for i in range(4)]
    assert ap.paged_layout([5], 20, 16, seed=3) == ap.paged_layout([5], 20, 16, seed=3)


def test_slots_follow_the_block_table():
    table = [7, 2, 9]
    assert ap.slots_for(table, 14, 4, 8) == [2 * 8 + 6, 2 * 8 + 7, 9 * 8 + 0, 9 * 8 + 1]
    b = ap.Batch([3, 2], max_len=10, block_size=4, seed=0, torch=None)
    starts, slots = b.step_values([3, 2])
    assert starts == [0, 3, 5] and b.seq_lens == [3, 2]
    assert slots[:3] == ap.slots_for(b.tables[0], 0, 3, 4) and slots[3:] == ap.slots_for(b.tables[1], 0, 2, 4)
    starts, slots = b.step_values([1, 1])  # a decode step writes position 3 and 2
    assert starts == [0, 1, 2] and slots == [
        *ap.slots_for(b.tables[0], 3, 1, 4),
        *ap.slots_for(b.tables[1], 2, 1, 4),
    ]
    assert b.num_blocks == 1 + 2 * 3


@dataclasses.dataclass
class _Meta:
    query_start_loc: int
    num_reqs: int
    causal: bool = True
    _seq_lens_cpu: int | None = None


def test_common_metadata_uses_the_declared_fields_only():
    m = ap.make_common_metadata(_Meta, {"query_start_loc": 1, "num_reqs": 2, "_seq_lens_cpu": 3, "extra": 4})
    assert m == _Meta(1, 2, True, 3)
    with pytest.raises(TypeError, match="num_reqs"):
        ap.make_common_metadata(_Meta, {"query_start_loc": 1})


class _MultipleOf:
    def __init__(self, base: int) -> None:
        self.base = base


@pytest.mark.parametrize(
    ("sizes", "want"),
    [
        ([16, 32, 64], 16),
        ([_MultipleOf(16)], 16),
        ([_MultipleOf(1)], 16),
        ([64], 64),
        ([_MultipleOf(64)], 64),
        ([], 16),
    ],
)
def test_pick_block_size(sizes, want):
    assert ap.pick_block_size(sizes) == want


def test_fa_unavailable_splits_import_failures_from_refusals(monkeypatch):
    from probe.probes import vllm_compat

    reasons = {
        2: "FA2 is unavailable due to: cannot import name '_vllm_fa2_C' from partially initialized module "
        "'vllm.vllm_flash_attn' (most likely due to a circular import)",
        3: None,
        4: "FA4 is only supported on devices with compute capability >= 10",
    }
    monkeypatch.setattr(vllm_compat, "fa_versions_available", lambda: reasons)
    with pytest.raises(ImportError, match="_vllm_fa2_C"):
        al.fa_unavailable(2)
    assert al.fa_unavailable(3) is None
    r = al.fa_unavailable(4)
    assert r is not None and r["outcome"] == "unsupported" and "compute capability" in r["reason"]


def test_fa2_import_failure_is_classified_import_error():
    """What the sandbox sees when the probe raises that ImportError: the worker's traceback."""
    from probe.sandbox.classifier import classify_text

    msg = (
        "ImportError: FlashAttention 2 does not import here: FA2 is unavailable due to: cannot import name "
        "'_vllm_fa2_C' from partially initialized module 'vllm.vllm_flash_attn' (most likely due to a "
        "circular import) (/tmp/site/vllm/vllm_flash_attn/__init__.py)"
    )
    frame = '  File "/x/probe/probes/attention_layer.py", line 9, in run'
    log = f"Traceback (most recent call last):\n{frame}\n{msg}\n"
    assert classify_text(log, completed=True).outcome.value == "import_error"


def test_tiny_config_is_the_head_layout():
    c = al.tiny_config(64, 8, 64)
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (64, 8, 64)
    assert c["num_hidden_layers"] == 1 and c["hidden_size"] == 64 * 64


def _need_gpu_and_vllm() -> None:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("vllm") is None:
        pytest.skip("torch / vLLM not installed (GPU-only test)")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")


@pytest.mark.gpu
@pytest.mark.vllm
@pytest.mark.parametrize(
    "params",
    [
        {"backend": "TRITON_ATTN", "num_heads": 32, "num_kv_heads": 2, "head_dim": 128},
        {
            "backend": "FLASH_ATTN",
            "fa_version": 3,
            "num_heads": 64,
            "num_kv_heads": 8,
            "head_dim": 64,
            "sinks": True,
        },
    ],
)
def test_layer_probe_on_the_gpu(params):
    _need_gpu_and_vllm()
    from probe.probes.common import LocalContext

    r = al.run(params, LocalContext())
    assert r["outcome"] == "ok", r
    assert r["ref_error"] < 0.02 and r["timings"]["prefill_ms"] > 0 and r["timings"]["decode_ms"] > 0
    assert r["details"]["control_errors"]["noncausal_prefill"] > 0.05  # the check can fail
