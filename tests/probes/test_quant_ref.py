"""Reference math of the MoE probe on CPU tensors (skipped when torch is not installed, as in CI)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: the reference math runs only with torch")

from probe.probes import quant_ref as q  # noqa: E402
from probe.probes.moe import fill_parameters, quantize_experts  # noqa: E402


def _w(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) / shape[-1] ** 0.5).to(torch.bfloat16)


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_e2m1_roundtrip_and_packing():
    vals = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -6.0, 0.26, 5.1])
    codes = q._e2m1_encode(vals)
    dec = q._e2m1_decode(codes)
    assert dec[:10].tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -6.0]
    assert dec[10].item() == 0.5 and dec[11].item() == 6.0  # round to nearest
    packed = q.pack_fp4(codes.view(1, -1))
    assert packed.shape == (1, 6) and packed.dtype == torch.uint8
    assert int(packed[0, 0]) == int(codes[0]) | (int(codes[1]) << 4)  # element 0 in the low nibble
    assert torch.equal(q.unpack_fp4(packed).view(-1), codes)


@pytest.mark.parametrize(("fn", "tol"), [("fp8", 0.05), ("fp8_block", 0.05), ("nvfp4", 0.15), ("mxfp4", 0.2)])
def test_quant_dequant_error_is_bounded(fn, tol):
    w = _w(3, 256, 256)
    if fn == "fp8":
        qq, s = q.quant_fp8_per_tensor(w)
        d = qq.float() * s[:, None, None]
    elif fn == "fp8_block":
        qq, s = q.quant_fp8_block(w)
        assert s.shape == (3, 2, 2)
        d = q.dequant_fp8_block(qq, s)
    elif fn == "nvfp4":
        p, bs, g = q.quant_nvfp4(w)
        assert p.shape == (3, 256, 128) and bs.shape == (3, 256, 16) and bs.dtype == torch.float8_e4m3fn
        d = q.dequant_nvfp4(p, bs, g)
    else:
        p, s = q.quant_mxfp4(w)
        assert s.dtype == torch.uint8 and s.shape == (3, 256, 8)
        d = q.dequant_mxfp4(p, s)
    assert 0 < _rel(d, w) < tol


def test_fp8_block_handles_ragged_shapes():
    w = _w(2, 200, 136)
    qq, s = q.quant_fp8_block(w)
    assert qq.shape == w.shape and s.shape == (2, 2, 2)
    assert _rel(q.dequant_fp8_block(qq, s), w) < 0.05


def test_gptq_int4_packing_matches_codes():
    w = _w(2, 64, 256)
    packed, scales, codes = q.quant_gptq_int4(w)
    assert packed.shape == (2, 32, 64) and packed.dtype == torch.int32 and scales.shape == (2, 2, 64)
    p64 = packed.to(torch.int64) & 0xFFFFFFFF
    for j in range(8):
        assert torch.equal((p64 >> (4 * j)) & 0xF, codes[:, j::8, :].to(torch.int64))
    assert _rel(q.dequant_gptq_int4(codes, scales), w) < 0.12


def test_router_logits_have_an_unambiguous_top_k():
    logits = q.make_router_logits(16, 60, 8, seed=3)
    top = logits.float().sort(dim=-1, descending=True).values
    assert bool((top[:, 7] - top[:, 8] >= 1.0).all())


def _naive_moe(x, logits, w13, w2, k):
    out = torch.zeros(x.shape[0], w2.shape[1])
    inter = w13.shape[1] // 2
    for t in range(x.shape[0]):
        p = torch.softmax(logits[t].float(), -1)
        w, ids = p.topk(k)
        w = w / w.sum()
        for wi, e in zip(w, ids, strict=True):
            h = w13[e].float() @ x[t].float()
            out[t] += wi * (w2[e].float() @ (torch.nn.functional.silu(h[:inter]) * h[inter:]))
    return out


def test_torch_moe_matches_naive_loop():
    e, h, i, k, m = 6, 32, 16, 2, 5
    x = _w(m, h, seed=1)
    w13, w2 = _w(e, 2 * i, h, seed=2), _w(e, h, i, seed=3)
    logits = q.make_router_logits(m, e, k, seed=4)
    assert _rel(q.torch_moe(x, logits, w13, w2, k), _naive_moe(x, logits, w13, w2, k)) < 1e-5


def test_check_output_flags_nan_and_zero():
    ref = torch.ones(4, 8)
    assert q.check_output(torch.full((4, 8), float("nan")), ref)[1].startswith("32 of 32")
    assert q.check_output(torch.zeros(4, 8), ref)[1] == "output is all zeros"
    err, problem = q.check_output(ref * 1.01, ref)
    assert problem is None and abs(err - 0.01) < 1e-6


@pytest.mark.parametrize("quant", ["bf16", "fp8", "fp8_block", "nvfp4", "int4_w4a16", "mxfp4"])
def test_quantize_experts_chunked_equals_whole(quant):
    w13, w2 = _w(5, 256, 256, seed=5), _w(5, 256, 128, seed=6)
    t1, r13a, r2a = quantize_experts(quant, w13, w2, torch, chunk=2)
    t2, r13b, r2b = quantize_experts(quant, w13, w2, torch, chunk=16)
    assert t1.keys() == t2.keys()
    for k in t1:
        assert torch.equal(
            t1[k].float() if t1[k].is_floating_point() else t1[k],
            t2[k].float() if t2[k].is_floating_point() else t2[k],
        ), k
    assert torch.equal(r13a, r13b) and torch.equal(r2a, r2b)
    assert _rel(r13a, w13) < q.TOLERANCE[quant] + 0.12


def test_fill_parameters_copies_pads_and_zeroes():
    m = torch.nn.Module()
    m.register_parameter("w13_weight", torch.nn.Parameter(torch.empty(2, 8, 4), requires_grad=False))
    m.register_parameter("w2_weight", torch.nn.Parameter(torch.empty(2, 6, 6), requires_grad=False))
    m.register_parameter("w13_input_scale", torch.nn.Parameter(torch.empty(2), requires_grad=False))
    m.register_parameter("w2_bias", torch.nn.Parameter(torch.empty(2, 6), requires_grad=False))
    src13, src2 = torch.randn(2, 8, 4), torch.randn(2, 4, 4)
    notes = fill_parameters(m, {"w13_weight": src13, "w2_weight": src2}, torch)
    assert torch.equal(m.w13_weight, src13)
    assert torch.equal(m.w2_weight[:, :4, :4], src2) and float(m.w2_weight[:, 4:].abs().sum()) == 0
    assert notes["padded"] and set(notes["zeroed"]) == {"w13_input_scale", "w2_bias"}
    assert torch.equal(m.w13_input_scale, torch.ones(2)) and float(m.w2_bias.abs().sum()) == 0
    with pytest.raises(RuntimeError, match="cannot map"):
        fill_parameters(m, {"w13_weight": torch.randn(3, 3)}, torch)
