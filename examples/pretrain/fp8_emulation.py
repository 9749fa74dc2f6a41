"""CPU emulation of flamia's FP8 attention, forward AND backward (docs/numerics.md §1-§5), as a
torch.autograd.Function, to study the contract's numerics in training without a GPU.

It follows the C++ reference (reference/forward_ref.cpp, backward_ref.cpp, operands_ref.cpp):
per-token (or document-local 32-token) power-of-two scales, E4M3 operands, integer row maximum M,
P̂ = q8(exp2(t - M + 8)), l = sum_j P̂_ij 2^-ev_j, O = P̂ V̂ / l (BF16); backward with D
from the quantized dO, dV through P̂ and dO/l (64-query tile-aligned blocks), dS = P (dP - D)
with P = P̂ 2^-ev / l, dQ through K̂c = q8(k - k_first) with G per (query row, 128-key block),
dK through Q̂ with H per (key row, 64-query block); `fp8-bf16grad` uses the BF16 inputs for dP,
dQ (against BF16 k - k_first), dK and a BF16 dS, with D from the BF16 dO.
Matrix products of E4M3 codes run in float64 (exact, as the reference's); scalar steps in FP32.

Ablation switches (not part of the contract) isolate which approximation matters:
- `exact_backward`: FP8 forward, but the float64 gradient of unquantized attention.
- `exact_forward`: float64 forward (BF16 output), FP8 backward of the contract.
- `center_bf16_keys`, `delta_from_bf16` (both the contract since 2026-11-29; False gives the
  earlier contract): fp8-bf16grad with dQ against BF16 k - k_first, and with D from the BF16 dO.
- `delta_consistent`: D_i = sum_j P_ij dP_ij from the same P and dP as dS (instead of dÔ . O,
  where O was built from P̂): the rows of dS then sum to zero whatever the FP8 errors.
- `quantized_denominator` (the contract since 2026-11-29; False gives the earlier contract): the
  forward's l sums the quantized P̂ (l = sum_j P̂_ij 2^-ev_j) and dS uses P = P̂ 2^-ev / l. O is
  then exactly the P-weighted mean of V̂, so D = dÔ . O is the row sum of P dP and the rows of dS
  sum to zero up to O's BF16 rounding. False: l sums the unquantized p and dS uses p 2^-ev / l.

    attend = make_attention(scale_mode="exact", precision="fp8", key_smoothing="none")
    out = attend(q, k, v, cu_seqlens, max_seqlen)  # (tokens, heads, dim), any float dtype
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

E4M3_MAX = 448.0
P_OFFSET = 8  # P̂ = q8(exp2(t - M + 8)): row maximum in (128, 256]
BLOCK32 = 32  # block32 scale blocks (document-local)
DO_SCALED_QUERY_BLOCK = 64  # dO / l copy: 64-query tile-aligned blocks
DQ_KEY_BLOCK = 128  # dS -> G for dQ: per (query row, 128-key tile-aligned block)
DK_QUERY_BLOCK = 64  # dS -> H for dK: per (key row, 64-query tile-aligned block)
TILE_ALIGN = 16  # tile-aligned blocks start at floor16(document start)
EXP_MIN, EXP_MAX = -126, 127


@dataclass(frozen=True)
class Fp8Config:
    scale_mode: str = "exact"  # "exact" or "block32"
    precision: str = "fp8"  # "fp8" or "fp8-bf16grad"
    key_smoothing: str = "none"  # "none" or "first_key"
    softmax_scale: float | None = None  # default 1/sqrt(head_dim)
    exact_backward: bool = False
    exact_forward: bool = False
    center_bf16_keys: bool = True
    delta_from_bf16: bool = True
    delta_consistent: bool = False  # D_i = sum_j P_ij dP_ij: rows of dS sum to 0 exactly
    quantized_denominator: bool = True  # l = sum_j P̂_ij 2^-ev_j; dS uses P̂ 2^-ev / l
    # Ablations of the forward (and the backward's recomputation), for the error study:
    exact_scores: bool = False  # S from the BF16 q, k (no Q̂, K̂ quantization)
    exact_values: bool = False  # O and l from the FP32 p and the BF16 v (no P̂, V̂)


# ---- scalar numerics (§1) --------------------------------------------------------------------


def e4m3(x: torch.Tensor) -> torch.Tensor:
    """q8(x) decoded, float32: round to nearest even, satfinite (clamp to ±448 first; torch's
    cast does not saturate)."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()


def bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).float()


def scale_exponent(amax: torch.Tensor) -> torch.Tensor:
    """Smallest e with amax 2^-e <= 448 (e = E - 8 if the mantissa 1 + m <= 1.75, else E - 7),
    clamped to [-126, 127]; 0 for amax 0, NaN, Inf. Returns float32 holding integers."""
    a = amax.float()
    mantissa, exponent = torch.frexp(a)  # a = mantissa 2^exponent, mantissa in [0.5, 1)
    e = torch.where(2 * mantissa <= 1.75, exponent - 9, exponent - 8).clamp(EXP_MIN, EXP_MAX)
    return torch.where((a == 0) | ~torch.isfinite(a), torch.zeros_like(e), e).float()


def _fake_quantize(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """x's dequantized E4M3 values at scales 2^e (broadcast over x), in x's dtype, with the
    identity as gradient (straight through). E4M3 values times a power of two are exact in BF16,
    so BF16 attention on these inputs makes exactly the operand error of FP8 and no other."""
    value = e4m3(x.detach().float() * torch.exp2(-e)) * torch.exp2(e)
    return value.to(x.dtype) + (x - x.detach())  # + exact zeros: the value, x's gradient


def fake_quantize_per_token(x: torch.Tensor) -> torch.Tensor:
    """x (tokens, heads, D) -> E4M3 values at each (token, head)'s scale (§1, `exact` blocks)."""
    return _fake_quantize(x, scale_exponent(x.detach().abs().amax(-1, keepdim=True)))


def ocp_scale_exponent(amax: torch.Tensor) -> torch.Tensor:
    """The OCP MX rule e = floor(log2 amax) - 8 (the audit's `unsafe` mode, numerics §1): the
    block maximum lands in [256, 512), so values above 448 clamp. 0 for amax 0, NaN, Inf."""
    a = amax.float()
    _, exponent = torch.frexp(a)  # a = mantissa 2^exponent, mantissa in [0.5, 1)
    e = (exponent - 9).clamp(EXP_MIN, EXP_MAX).float()
    return torch.where((a == 0) | ~torch.isfinite(a), torch.zeros_like(e), e)


def fake_quantize_unsafe_blocks(x: torch.Tensor) -> torch.Tensor:
    """x (tokens, heads, D) -> E4M3 values at the audit's `unsafe` scales: one OCP scale per
    (global block of 32 tokens, head), blocks counted from the packed sequence's first token,
    so they cross document boundaries and a token's value depends on later tokens of its block
    (the causality leak flamia's modes avoid)."""
    tokens = x.shape[0]
    padded = -(-tokens // BLOCK32) * BLOCK32
    a = x.detach().float().abs().amax(-1)  # (tokens, heads)
    a = torch.nn.functional.pad(a, (0, 0, 0, padded - tokens))
    block_amax = a.view(padded // BLOCK32, BLOCK32, -1).amax(1)  # (blocks, heads)
    e = ocp_scale_exponent(block_amax).repeat_interleave(BLOCK32, 0)[:tokens].unsqueeze(-1)
    return _fake_quantize(x, e)


# ---- blocks and quantization (§2, §3) ---------------------------------------------------------


def operand_block_ids(start: int, length: int, scale_mode: str, device=None) -> torch.Tensor:
    """Block index of each token of a document for the operand copies: one token per block
    (`exact`) or document-local blocks of 32."""
    idx = torch.arange(length, device=device)
    return idx if scale_mode == "exact" else idx // BLOCK32


def tile_block_ids(start: int, length: int, size: int, device=None) -> torch.Tensor:
    """Tile-aligned blocks: start at floor16(doc_start) + n * size, intersected with the doc."""
    base = start - start % TILE_ALIGN
    return (torch.arange(start, start + length, device=device) - base) // size


def block_amax(x: torch.Tensor, ids: torch.Tensor, dim: int) -> torch.Tensor:
    """Max of |x| over blocks of `ids` along `dim`, broadcast back to every element's block."""
    n = int(ids.max()) + 1 if ids.numel() else 0
    a = x.abs().movedim(dim, -1)
    out = torch.zeros(a.shape[:-1] + (n,), dtype=a.dtype, device=a.device)
    out = out.scatter_reduce(-1, ids.expand(a.shape), a, reduce="amax", include_self=True)
    return out.gather(-1, ids.expand(a.shape)).movedim(-1, dim)


def quantize_tokens(x: torch.Tensor, ids: torch.Tensor):
    """x (L, H, D): per (block, head) exponent over all D channels. Returns (codes float32
    holding E4M3 values, exponents (L, H) float32)."""
    token_amax = x.abs().amax(dim=2)  # (L, H)
    e = scale_exponent(block_amax(token_amax, ids, dim=0))
    return e4m3(x * torch.exp2(-e).unsqueeze(2)), e


# ---- the attention -----------------------------------------------------------------------------


def _causal(lq: int, lk: int, device=None) -> torch.Tensor:
    i = torch.arange(lq, device=device).unsqueeze(1)
    j = torch.arange(lk, device=device).unsqueeze(0)
    return j <= i + (lk - lq)


class _DocOperands:
    """Quantized operands of one document (all heads)."""

    def __init__(self, q, k, v, start, cfg: Fp8Config):
        length = q.shape[0]
        ids = operand_block_ids(start, length, cfg.scale_mode, q.device)
        self.ids = ids
        m = k[:1].expand_as(k) if cfg.key_smoothing == "first_key" else torch.zeros_like(k)
        self.m = m
        self.q, self.eq = quantize_tokens(q, ids)
        self.k, self.ek = quantize_tokens(k - m, ids)
        self.v, self.ev = quantize_tokens(v, ids)
        self.kc, self.ekc = quantize_tokens(k - k[:1], ids)  # K̂c: centred on the first key
        self.raw_q, self.raw_k, self.raw_v = q, k, v
        self.exact_scores, self.exact_values = cfg.exact_scores, cfg.exact_values


def _forward_doc(ops: _DocOperands, h: int, g: int, c: float, quantized_l: bool = False):
    """§4 for one document and head: (O float32 before BF16, M, l, p (FP32 exp2), P̂)."""
    s = (ops.q[:, h].double() @ ops.k[:, g].double().T).float()  # exact, to FP32
    row = (c * torch.exp2(ops.eq[:, h])).unsqueeze(1)
    col = torch.exp2(ops.ek[:, g]).unsqueeze(0)
    if ops.exact_scores:
        s = (ops.raw_q[:, h].double() @ ops.raw_k[:, g].double().T).float()
        row, col = torch.full_like(row, c), torch.ones_like(col)
    t = ((s * col).double() * row.double() + ops.ev[:, g].double().unsqueeze(0)).float()
    lq, lk = t.shape
    t = t.masked_fill(~_causal(lq, lk, t.device), -math.inf)
    m = torch.ceil(t.amax(dim=1, keepdim=True))
    p = torch.exp2(t - m + P_OFFSET)
    p_hat = e4m3(p)
    summed = p_hat if quantized_l else p
    inv_value_scale = torch.exp2(-ops.ev[:, g].double()).unsqueeze(0)
    if ops.exact_values:
        weights = p.double() * inv_value_scale
        l = weights.sum(1, keepdim=True).float()
        o = (weights @ ops.raw_v[:, g].double()).float() / l
    else:
        l = (summed.double() * inv_value_scale).sum(1, keepdim=True).float()
        o = (p_hat.double() @ ops.v[:, g].double()).float() / l
    return o, m, l, p, p_hat


def _f64_attention_doc(q, k, v, scale):
    """Unquantized attention of one document, float64, (L, Hq, D) / (L, Hkv, D), GQA."""
    group = q.shape[1] // k.shape[1]
    qd = q.double().transpose(0, 1)
    kd = k.double().repeat_interleave(group, 1).transpose(0, 1)
    vd = v.double().repeat_interleave(group, 1).transpose(0, 1)
    s = scale * qd @ kd.transpose(1, 2)
    s = s.masked_fill(~_causal(q.shape[0], k.shape[0], s.device), -math.inf)
    return torch.softmax(s, dim=-1) @ vd  # (Hq, L, D)


def _backward_doc(q, k, v, o, do, ops: _DocOperands, stats, start, cfg: Fp8Config, scale):
    """§5 for one document: (dq, dk, dv) float32."""
    lq, heads_q, dim = q.shape
    heads_kv = k.shape[1]
    group = heads_q // heads_kv
    dq = torch.zeros(lq, heads_q, dim, device=q.device)
    dk = torch.zeros(lq, heads_kv, dim, dtype=torch.float64, device=q.device)
    dv = torch.zeros(lq, heads_kv, dim, dtype=torch.float64, device=q.device)
    d_o, edo = quantize_tokens(do, ops.ids)
    delta = (d_o.double() * o.double()).sum(2).float() * torch.exp2(edo)  # (L, Hq)
    if cfg.delta_from_bf16 and cfg.precision != "fp8":  # fp8-bf16grad's dP uses the BF16 dO
        delta = (do.double() * o.double()).sum(2).float()
    c = float(torch.tensor(scale, dtype=torch.float32) * math.log2(math.e))
    qblk64 = tile_block_ids(start, lq, DO_SCALED_QUERY_BLOCK, q.device)
    kblk128 = tile_block_ids(start, lq, DQ_KEY_BLOCK, q.device)
    qblk_dk = tile_block_ids(start, lq, DK_QUERY_BLOCK, q.device)
    mask = _causal(lq, lq, q.device)
    for h in range(heads_q):
        g = h // group
        if cfg.exact_forward:  # recompute P̂ exactly as the FP8 forward would have
            _, m_row, l_row, p, p_hat = _forward_doc(ops, h, g, c, cfg.quantized_denominator)
        else:
            m_row, l_row = stats[h]
            _, _, _, p, p_hat = _forward_doc(ops, h, g, c, cfg.quantized_denominator)
        l_row = l_row.float()
        ev = ops.ev[:, g]
        prob_source = p_hat if cfg.quantized_denominator else p
        prob = (prob_source * torch.exp2(-ev).unsqueeze(0)) / l_row  # straight-through P (step 2)
        if cfg.precision == "fp8":
            dp = ((d_o[:, h].double() @ ops.v[:, g].double().T).float()
                  * torch.exp2(edo[:, h]).unsqueeze(1) * torch.exp2(ev).unsqueeze(0))
        else:
            dp = (do[:, h].double() @ v[:, g].double().T).float()
        dp = dp.masked_fill(~mask, 0.0)
        row_delta = delta[:, h].unsqueeze(1)
        if cfg.delta_consistent:
            row_delta = (prob.double() * dp.double()).sum(1, keepdim=True).float()
        ds = prob * (dp - row_delta)
        ds = ds.masked_fill(~mask, 0.0)
        if cfg.precision != "fp8":
            ds = bf16(ds)
        # dV (step 6): dO'' = q8((dO fl(1/l)) 2^-ew), one exponent per (64-query block, head).
        dos = do[:, h] * (1.0 / l_row)
        ew = scale_exponent(block_amax(dos.abs().amax(1), qblk64, 0))
        dos_hat = e4m3(dos * torch.exp2(-ew).unsqueeze(1)) * torch.exp2(ew).unsqueeze(1)
        dv[:, g] += torch.exp2(-ev.double()).unsqueeze(1) * (p_hat.double().T @ dos_hat.double())
        if cfg.precision == "fp8":
            # dQ (step 7): G per (row, 128-key block) of dS 2^ekc, against K̂c.
            x = ds * torch.exp2(ops.ekc[:, g]).unsqueeze(0)
            gq = scale_exponent(block_amax(x, kblk128, 1))
            gmat = e4m3(x * torch.exp2(-gq)) * torch.exp2(gq)
            dq[:, h] = (scale * (gmat.double() @ ops.kc[:, g].double())).float()
            # dK (step 8): H per (key row, 64-query block) of dS 2^eq, against Q̂.
            y = ds * torch.exp2(ops.eq[:, h]).unsqueeze(1)
            gk = scale_exponent(block_amax(y, qblk_dk, 0))
            hmat = e4m3(y * torch.exp2(-gk)) * torch.exp2(gk)
            dk[:, g] += scale * (hmat.double().T @ ops.q[:, h].double())
        else:
            keys = bf16(k[:, g] - k[:1, g]) if cfg.center_bf16_keys else k[:, g]
            dq[:, h] = (scale * (ds.double() @ keys.double())).float()
            dk[:, g] += scale * (ds.double().T @ q[:, h].double())
    return dq, dk.float(), dv.float()


class Fp8Attention(torch.autograd.Function):
    """Packed causal attention over documents with the contract's numerics."""

    @staticmethod
    def forward(ctx, q, k, v, bounds, cfg: Fp8Config):
        dtype = q.dtype
        q, k, v = bf16(q.detach()), bf16(k.detach()), bf16(v.detach())  # BF16 inputs
        scale = cfg.softmax_scale or 1.0 / math.sqrt(q.shape[2])
        c = float(torch.tensor(scale, dtype=torch.float32) * math.log2(math.e))
        heads_q, heads_kv = q.shape[1], k.shape[1]
        out = torch.zeros_like(q)
        stats = []
        for start, end in bounds:
            if end == start:
                stats.append(None)
                continue
            if cfg.exact_forward:
                o = _f64_attention_doc(q[start:end], k[start:end], v[start:end], scale)
                out[start:end] = o.transpose(0, 1).float()
                stats.append(None)
                continue
            ops = _DocOperands(q[start:end], k[start:end], v[start:end], start, cfg)
            doc_stats = []
            for h in range(heads_q):
                o, m, l, _, _ = _forward_doc(ops, h, h // (heads_q // heads_kv), c,
                                             cfg.quantized_denominator)
                out[start:end, h] = o
                doc_stats.append((m, l))
            stats.append(doc_stats)
        out = bf16(out)
        ctx.save_for_backward(q, k, v, out)
        ctx.bounds, ctx.cfg, ctx.stats, ctx.scale = bounds, cfg, stats, scale
        return out.to(dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out = ctx.saved_tensors
        cfg, scale = ctx.cfg, ctx.scale
        dtype = dout.dtype
        do = bf16(dout)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for (start, end), stats in zip(ctx.bounds, ctx.stats):
            if end == start:
                continue
            sl = slice(start, end)
            if cfg.exact_backward:
                with torch.enable_grad():
                    qd, kd, vd = (t[sl].double().requires_grad_() for t in (q, k, v))
                    o = _f64_attention_doc(qd, kd, vd, scale).transpose(0, 1)
                    g = torch.autograd.grad(o, (qd, kd, vd), do[sl].double())
                dq[sl], dk[sl], dv[sl] = (x.float() for x in g)
                continue
            ops = _DocOperands(q[sl], k[sl], v[sl], start, cfg)
            dq[sl], dk[sl], dv[sl] = _backward_doc(q[sl], k[sl], v[sl], out[sl], do[sl], ops,
                                                   stats, start, cfg, scale)
        return dq.to(dtype), dk.to(dtype), dv.to(dtype), None, None


def attention_f64(q, k, v, bounds, scale=None):
    """Differentiable float64 reference over packed documents: (tokens, Hq, D) float64."""
    scale = scale or 1.0 / math.sqrt(q.shape[2])
    outs = [_f64_attention_doc(q[s:e], k[s:e], v[s:e], scale).transpose(0, 1)
            for s, e in bounds]
    return torch.cat(outs, 0)


def make_attention(**kwargs):
    """An `attend(q, k, v, cu_seqlens, max_seqlen)` for model.py; bounds come from cu_seqlens."""
    cfg = Fp8Config(**kwargs)

    def attend(q, k, v, cu_seqlens, max_seqlen):
        cu = cu_seqlens.tolist()
        return Fp8Attention.apply(q, k, v, list(zip(cu[:-1], cu[1:])), cfg)

    attend.cfg = cfg
    return attend
