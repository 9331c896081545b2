"""Backend-independent weight quantization + the torch MoE reference (child side; torch imported lazily).

The MoE probe creates *checkpoint-format* tensors from known bf16 weights with the code below
(plain torch, the published formats: FP8 E4M3 per-tensor / 128x128 block, ModelOpt NVFP4
(E2M1 + FP8 block-16 scales + FP32 global scale), GPTQ int4 (uint4b8, group 128, packed along K),
OCP MXFP4 (E2M1 + E8M0 block-32 scales)), hands them to vLLM's layer, and lets vLLM's
``process_weights_after_loading`` repack/shuffle them for the backend under test.  The reference
is computed from *our own dequantization of the same checkpoint tensors* — so it does not depend
on any backend's layout, and a backend that mis-repacks gets a large error.

Layouts follow vLLM's MoE parameters: ``w13`` is ``[E, 2*I, H]`` (gate rows first, then up),
``w2`` is ``[E, H, I]``; activation SiLU-and-mul, softmax top-k routing with renormalisation.
"""

from __future__ import annotations

from typing import Any

FP8_MAX = 448.0
FP4_MAX = 6.0
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

# Max allowed relative L2 error ||y - ref|| / ||ref|| per quant scheme (see docs/probes.md).
TOLERANCE: dict[str, float] = {
    "bf16": 0.02,  # bf16 rounding of activations / accumulation order only
    "fp8": 0.10,  # + dynamic FP8 activation quantization (seen: triton 0.058, marlin 0.034)
    "fp8_block": 0.10,  # + per-token-group FP8 activation quantization (seen: triton 0.047, deep_gemm 0.067)
    "int4_w4a16": 0.03,  # weights exact (reference uses the dequantized int4); bf16 activations
    "nvfp4": 0.20,  # W4A4 kernels also quantize activations to E2M1 (W4A16 Marlin is far below)
    "mxfp4": 0.20,  # MXFP4 kernels may quantize activations (MXFP8/MXFP4) depending on backend
}


def _torch() -> Any:
    import torch

    return torch


# --------------------------------------------------------------------------- FP8 E4M3


def quant_fp8_per_tensor(w: Any) -> tuple[Any, Any]:
    """w [..., N, K] float -> (fp8 tensor, fp32 scale over the last two dims: shape w.shape[:-2])."""
    torch = _torch()
    amax = w.float().abs().amax(dim=(-2, -1)).clamp(min=1e-12)
    scale = amax / FP8_MAX
    q = (w.float() / scale[..., None, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def quant_fp8_block(w: Any, block: tuple[int, int] = (128, 128)) -> tuple[Any, Any]:
    """w [E, N, K] -> (fp8 [E, N, K], fp32 scale_inv [E, ceil(N/bn), ceil(K/bk)])."""
    torch = _torch()
    e, n, k = w.shape
    bn, bk = block
    nb, kb = -(-n // bn), -(-k // bk)
    pad = torch.zeros(e, nb * bn, kb * bk, dtype=torch.float32, device=w.device)
    pad[:, :n, :k] = w.float()
    blocks = pad.view(e, nb, bn, kb, bk)
    amax = blocks.abs().amax(dim=(2, 4)).clamp(min=1e-12)
    scale = amax / FP8_MAX
    q = (blocks / scale[:, :, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(e, nb * bn, kb * bk)[:, :n, :k].contiguous().to(torch.float8_e4m3fn)
    return q, scale


def dequant_fp8_block(q: Any, scale: Any, block: tuple[int, int] = (128, 128)) -> Any:
    _, n, k = q.shape
    s = scale.repeat_interleave(block[0], dim=1)[:, :n].repeat_interleave(block[1], dim=2)[:, :, :k]
    return q.float() * s


# --------------------------------------------------------------------------- E2M1 (FP4)


def _e2m1_encode(x: Any) -> Any:
    """float tensor already scaled into [-6, 6] -> uint8 codes 0..15 (round to nearest value)."""
    torch = _torch()
    vals = torch.tensor(E2M1_VALUES, device=x.device)
    mag = x.abs().clamp(max=FP4_MAX)
    idx = (mag[..., None] - vals).abs().argmin(dim=-1).to(torch.uint8)
    sign = ((x < 0) & (idx > 0)).to(torch.uint8) << 3
    return idx | sign


def _e2m1_decode(codes: Any) -> Any:
    torch = _torch()
    vals = torch.tensor(E2M1_VALUES, device=codes.device)
    mag = vals[(codes & 7).long()]
    return torch.where((codes & 8) > 0, -mag, mag)


def pack_fp4(codes: Any) -> Any:
    """[..., K] codes -> [..., K/2] uint8, element 2i in the low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).contiguous()


def unpack_fp4(packed: Any) -> Any:
    torch = _torch()
    lo, hi = packed & 0x0F, (packed >> 4) & 0x0F
    return torch.stack([lo, hi], dim=-1).flatten(-2)


def quant_nvfp4(w: Any, group: int = 16) -> tuple[Any, Any, Any]:
    """w [E, N, K] -> (packed uint8 [E, N, K/2], fp8 block scales [E, N, K/16], global scale [E]).

    ModelOpt convention: weight_scale_2 = 1 / global_scale; dequant = e2m1 * block_scale / global_scale.
    """
    torch = _torch()
    e, n, k = w.shape
    wf = w.float()
    gscale = FP8_MAX * FP4_MAX / wf.abs().amax(dim=(1, 2)).clamp(min=1e-12)  # [E]
    blocks = wf.view(e, n, k // group, group)
    bscale = (blocks.abs().amax(dim=-1) / FP4_MAX * gscale[:, None, None]).clamp(max=FP8_MAX)
    bscale_fp8 = bscale.to(torch.float8_e4m3fn)
    denom = (bscale_fp8.float() / gscale[:, None, None]).clamp(min=1e-30)
    codes = _e2m1_encode(blocks / denom[..., None]).view(e, n, k)
    return pack_fp4(codes), bscale_fp8, gscale


def dequant_nvfp4(packed: Any, bscale_fp8: Any, gscale: Any, group: int = 16) -> Any:
    e, n, _ = packed.shape
    vals = _e2m1_decode(unpack_fp4(packed)).view(e, n, -1, group)
    return (vals * (bscale_fp8.float() / gscale[:, None, None])[..., None]).view(e, n, -1)


def quant_mxfp4(w: Any, group: int = 32) -> tuple[Any, Any]:
    """w [E, N, K] -> (packed uint8 [E, N, K/2], E8M0 scales uint8 [E, N, K/32])."""
    torch = _torch()
    e, n, k = w.shape
    blocks = w.float().view(e, n, k // group, group)
    amax = blocks.abs().amax(dim=-1).clamp(min=2.0**-120)
    exp = torch.ceil(torch.log2(amax / FP4_MAX)).clamp(-127, 127)
    scale_u8 = (exp + 127).to(torch.uint8)
    codes = _e2m1_encode(blocks / torch.exp2(exp)[..., None]).view(e, n, k)
    return pack_fp4(codes), scale_u8


def dequant_mxfp4(packed: Any, scale_u8: Any, group: int = 32) -> Any:
    torch = _torch()
    e, n, _ = packed.shape
    vals = _e2m1_decode(unpack_fp4(packed)).view(e, n, -1, group)
    return (vals * torch.exp2(scale_u8.float() - 127)[..., None]).view(e, n, -1)


# --------------------------------------------------------------------------- GPTQ int4


def quant_gptq_int4(w: Any, group: int = 128) -> tuple[Any, Any, Any]:
    """w [E, N, K] (out, in) -> (qweight int32 [E, K/8, N], scales [E, K/g, N], q uint4b8 [E, K, N]).

    Symmetric uint4b8: value = (q - 8) * scale, q in 0..15, packed 8 per int32 along K (GPTQ layout).
    """
    torch = _torch()
    e, n, k = w.shape
    wt = w.float().transpose(1, 2)  # [E, K, N]
    g = wt.view(e, k // group, group, n)
    scale = (g.abs().amax(dim=2) / 7.0).clamp(min=1e-8)  # [E, K/g, N]
    scale = scale.to(w.dtype).float()  # the checkpoint stores scales in bf16
    q = (g / scale[:, :, None, :]).round().clamp(-8, 7).add(8).to(torch.int64).view(e, k, n)
    packed = torch.zeros(e, k // 8, n, dtype=torch.int64, device=w.device)
    for j in range(8):
        packed |= q[:, j::8, :] << (4 * j)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
    return packed, scale.to(w.dtype), q.to(torch.uint8)


def dequant_gptq_int4(q: Any, scales: Any, group: int = 128) -> Any:
    """q uint4b8 [E, K, N], scales [E, K/g, N] -> float [E, N, K]."""
    s = scales.float().repeat_interleave(group, dim=1)
    return ((q.float() - 8.0) * s).transpose(1, 2).contiguous()


# --------------------------------------------------------------------------- routing + reference


def make_router_logits(m: int, e: int, top_k: int, seed: int, device: str = "cpu") -> Any:
    """Logits whose top-k set is unambiguous: chosen experts in [1, 3], the rest in [-3, -1]."""
    torch = _torch()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    logits = torch.rand(m, e, generator=gen) * 2 - 3
    for t in range(m):
        chosen = torch.randperm(e, generator=gen)[:top_k]
        logits[t, chosen] = 1 + 2 * torch.rand(top_k, generator=gen)
    return logits.to(device=device, dtype=torch.bfloat16)


def route(logits: Any, top_k: int, renormalize: bool = True) -> tuple[Any, Any]:
    torch = _torch()
    probs = torch.softmax(logits.float(), dim=-1)
    w, ids = probs.topk(top_k, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids


def torch_moe(
    x: Any, logits: Any, w13: Any, w2: Any, top_k: int, renormalize: bool = True, activation: str = "silu"
) -> Any:
    """Float32 reference: y = sum_k w_k * W2_e (act(W13_e x)) over the top-k experts of each token."""
    torch = _torch()
    xf = x.float()
    tw, ids = route(logits, top_k, renormalize)
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    inter = w13.shape[1] // 2
    for e in ids.unique().tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        h = xf[tok] @ w13[e].float().t()
        if activation == "swigluoai":
            gate, up = h[:, 0::2].clamp(max=7.0), h[:, 1::2].clamp(-7.0, 7.0)
            a = (up + 1) * gate * torch.sigmoid(1.702 * gate)
        else:
            a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
        out.index_add_(0, tok, (a @ w2[e].float().t()) * tw[tok, slot, None])
    return out


def check_output(y: Any, ref: Any) -> tuple[float | None, str | None]:
    """(relative L2 error, problem) — problem is set for NaN/inf/all-zero output."""
    torch = _torch()
    yf = y.float()
    if not torch.isfinite(yf).all():
        bad = int((~torch.isfinite(yf)).sum())
        return None, f"{bad} of {yf.numel()} outputs are NaN/inf"
    if yf.abs().max() == 0:
        return None, "output is all zeros"
    err = float((yf - ref.float()).norm() / ref.float().norm().clamp(min=1e-12))
    return err, None
