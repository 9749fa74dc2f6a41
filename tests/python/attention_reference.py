"""References for the Python tests, in plain PyTorch (any device).

- `attention_f64`: unquantized softmax attention in float64 over packed documents (GQA,
  bottom-right causal, fully masked rows give O = 0 and LSE = -inf); differentiable.
- `contract_forward`: the forward of docs/numerics.md §1-§4 (E4M3 operands with power-of-two
  scales per token or per document-local 32-token block, integer row maximum M, quantized P̂,
  l summed over the same P̂), as the C++ reference computes it. The kernels must match it to
  within the tolerances of §7, far tighter than their distance from float64.
- `rel_l2`: relative L2 distance of two tensors of one shape; `LSE_FLIP_BOUND`,
  `LSE_MEAN_BOUND`: how far a kernel's LSE may lie from the contract's, per row and on average.
- `poison_cuda_allocator`: a value left in every free block of torch's CUDA caching allocator,
  so that GPU tests see the outputs a kernel forgot to write.
"""

from __future__ import annotations

import math

import torch

E4M3_MAX = 448.0
SCALE_BLOCK = 32  # block32 scale blocks (document-local)
P_OFFSET = 8  # P̂ = q8(exp2(t - M + 8)): its row maximum lies in (128, 256]
EXPONENT_MIN, EXPONENT_MAX = -126, 127


def doc_bounds(cu_seqlens: torch.Tensor) -> list[tuple[int, int]]:
    cu = cu_seqlens.tolist()
    return list(zip(cu[:-1], cu[1:]))


def causal_mask(lq: int, lk: int, device, window: int = 0) -> torch.Tensor:
    """Bottom-right aligned: query i sees key j when j <= i + (lk - lq), and, with a sliding
    window of `window` keys (0: none), when i + (lk - lq) - j < window."""
    i = torch.arange(lq, device=device).unsqueeze(1)
    j = torch.arange(lk, device=device).unsqueeze(0)
    visible = j <= i + (lk - lq)
    return visible & (i + (lk - lq) - j < window) if window > 0 else visible


def attention_f64(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window=0):
    """Float64 attention; q (Tq, Hq, D), k/v (Tk, Hkv, D) of any float dtype. Returns
    (out (Tq, Hq, D) float64, lse (Hq, Tq) float64). Differentiable in q, k, v. window: a causal
    sliding window of that many keys (0: none)."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    outs, lses = [], []
    for (qs, qe), (ks, ke) in zip(doc_bounds(cu_seqlens_q), doc_bounds(cu_seqlens_k)):
        lq, lk = qe - qs, ke - ks
        qd = q[qs:qe].transpose(0, 1)  # (Hq, lq, D)
        kd = k[ks:ke].repeat_interleave(group, dim=1).transpose(0, 1)
        vd = v[ks:ke].repeat_interleave(group, dim=1).transpose(0, 1)
        s = softmax_scale * qd @ kd.transpose(1, 2)  # (Hq, lq, lk)
        visible = (causal_mask(lq, lk, q.device, window) if causal
                   else torch.ones(lq, lk, dtype=torch.bool, device=q.device))
        s = s.masked_fill(~visible, -math.inf)
        row_max = s.amax(dim=2, keepdim=True) if lk > 0 else s.new_full((q.shape[1], lq, 1),
                                                                         -math.inf)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        p = torch.exp(s - row_max) * visible
        l = p.sum(dim=2, keepdim=True)
        has_key = l > 0
        o = torch.where(has_key, (p @ vd) / torch.where(has_key, l, torch.ones_like(l)), 0.0)
        lse = torch.where(has_key, torch.log(torch.where(has_key, l, torch.ones_like(l)))
                          + row_max, -math.inf)
        outs.append(o.transpose(0, 1))
        lses.append(lse.squeeze(2))
    return torch.cat(outs, dim=0), torch.cat(lses, dim=1)


# ---- the numerics contract (docs/numerics.md) ---------------------------------------------------


def e4m3(x: torch.Tensor) -> torch.Tensor:
    """q8(x): E4M3 round to nearest even, returned as float32. Callers keep |x| <= 448."""
    return x.float().to(torch.float8_e4m3fn).float()


def scale_exponent(amax: torch.Tensor) -> torch.Tensor:
    """The §1 scale rule: the smallest e with amax * 2^-e <= 448, from amax's FP32 exponent and
    mantissa; 0 for amax 0, NaN or Inf. Returns int32."""
    a = amax.float()
    mantissa, exponent = torch.frexp(a)  # a = mantissa * 2^exponent, mantissa in [0.5, 1)
    fp32_exponent = exponent - 1  # a = (2 * mantissa) * 2^(exponent - 1), 2 * mantissa in [1, 2)
    e = torch.where(2 * mantissa <= 1.75, fp32_exponent - 8, fp32_exponent - 7)
    e = e.clamp(EXPONENT_MIN, EXPONENT_MAX)
    return torch.where((a == 0) | ~torch.isfinite(a), torch.zeros_like(e), e).int()


def block_exponents(x: torch.Tensor, cu_seqlens: torch.Tensor, scale_mode: str) -> torch.Tensor:
    """Per (token, head) exponents of x (T, H, D) for `scale_mode` (§2): one per token, or one
    per document-local 32-token block repeated over its tokens."""
    token_amax = x.float().abs().amax(dim=2)  # (T, H)
    if scale_mode == "exact":
        return scale_exponent(token_amax)
    amax = token_amax.clone()
    for start, end in doc_bounds(cu_seqlens):
        for b in range(start, end, SCALE_BLOCK):
            e = min(b + SCALE_BLOCK, end)
            amax[b:e] = token_amax[b:e].amax(dim=0, keepdim=True)
    return scale_exponent(amax)


def _quantize(x: torch.Tensor, exponents: torch.Tensor) -> torch.Tensor:
    return e4m3(x.float() * torch.exp2(-exponents.float()).unsqueeze(2))


def _smoothing_vectors(k: torch.Tensor, cu_seqlens_k: torch.Tensor, key_smoothing) -> torch.Tensor:
    """m per key token (Tk, Hkv, D) float32 for §4.1."""
    if isinstance(key_smoothing, torch.Tensor):
        return key_smoothing.float().unsqueeze(0).expand(k.shape[0], -1, -1)
    m = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
    if key_smoothing == "first_key":
        for start, end in doc_bounds(cu_seqlens_k):
            if end > start:
                m[start:end] = k[start].float()
    return m


def contract_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal,
                     scale_mode="exact", key_smoothing="none"):
    """The forward of docs/numerics.md §4 for BF16 q, k, v. Returns (out float32, lse float32)."""
    heads_q, heads_kv = q.shape[1], k.shape[1]
    group = heads_q // heads_kv
    eq = block_exponents(q, cu_seqlens_q, scale_mode)
    m = _smoothing_vectors(k, cu_seqlens_k, key_smoothing)
    k_shifted = k.float() - m
    ek = block_exponents(k_shifted, cu_seqlens_k, scale_mode)
    ev = block_exponents(v, cu_seqlens_k, scale_mode)
    q_hat, k_hat, v_hat = _quantize(q, eq), _quantize(k_shifted, ek), _quantize(v, ev)
    c = torch.tensor(softmax_scale * math.log2(math.e), dtype=torch.float32)
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full((heads_q, q.shape[0]), -math.inf, dtype=torch.float32, device=q.device)
    for (qs, qe), (ks, ke) in zip(doc_bounds(cu_seqlens_q), doc_bounds(cu_seqlens_k)):
        lq, lk = qe - qs, ke - ks
        if lq == 0 or lk == 0:
            continue
        visible = (causal_mask(lq, lk, q.device) if causal
                   else torch.ones(lq, lk, dtype=torch.bool, device=q.device))
        for h in range(heads_q):
            g = h // group
            s = (q_hat[qs:qe, h].double() @ k_hat[ks:ke, g].double().T).float()  # exact, to FP32
            row_factor = (c * torch.exp2(eq[qs:qe, h].float())).unsqueeze(1)  # exact in FP32
            col_factor = torch.exp2(ek[ks:ke, g].float()).unsqueeze(0)
            ev_row = ev[ks:ke, g].float().unsqueeze(0)
            # fma(S * 2^ek, c * 2^eq, ev): the product is exact in double, one rounding to FP32.
            t = ((s * col_factor).double() * row_factor.double() + ev_row.double()).float()
            t = t.masked_fill(~visible, -math.inf)
            row_max = torch.ceil(t.amax(dim=1, keepdim=True))
            has_key = torch.isfinite(row_max)
            row_max = torch.where(has_key, row_max, torch.zeros_like(row_max))
            p = torch.exp2(t - row_max + P_OFFSET)  # masked: exp2(-inf) = 0
            p_hat = e4m3(p)
            l = (p_hat.double() * torch.exp2(-ev_row.double())).sum(dim=1, keepdim=True).float()
            o = (p_hat.double() @ v_hat[ks:ke, g].double()).float() / l
            out[qs:qe, h] = torch.where(has_key, o, 0.0)
            row_lse = torch.log(l) + (row_max - P_OFFSET) * math.log(2.0)
            shift = softmax_scale * (q[qs:qe, h].float() * m[ks, g].unsqueeze(0)).sum(dim=1)
            lse[h, qs:qe] = torch.where(has_key, row_lse, -math.inf).squeeze(1) + shift
    return out, lse


def rel_l2(x: torch.Tensor, reference: torch.Tensor) -> float:
    # Same shape and non-empty: an empty pair gave 0 (any bound passed), and x - reference
    # broadcast a slice of the wrong shape into a comparison that could pass.
    assert x.shape == reference.shape, (x.shape, reference.shape)
    assert reference.numel() > 0, "rel_l2 of empty tensors checks nothing"
    x, reference = x.double(), reference.double()
    return float(torch.linalg.vector_norm(x - reference)
                 / torch.linalg.vector_norm(reference).clamp_min(1e-30))


# ---- bounds of a kernel's LSE against the contract's ------------------------------------------

# l sums the quantized P̂ (docs/numerics.md §4 step 5): where the tensor cores' FP8 accumulation
# (or, in a ring, another block's running max) moves a row's largest P̂ across an E4M3 rounding
# boundary, its LSE moves by up to one E4M3 step of the top binade, ln(1 + 1/8) (rows with few
# keys); on average far less.
LSE_FLIP_BOUND = math.log(1.0 + 1.0 / 8.0) + 1e-3
LSE_MEAN_BOUND = 2e-3

# ---- poisoning the CUDA caching allocator --------------------------------------------------------

# torch's CUDA caching allocator serves requests of at most 1 MiB from a pool of its own (2 MiB
# segments), larger ones from another; each request gets the smallest free block of its pool that
# fits (c10/cuda/CUDACachingAllocator.cpp).
SMALL_POOL_MAX_BYTES = 1 << 20


def poison_cuda_allocator(fill: float, nbytes: int, device=None) -> None:
    """Leaves `fill` (as float32) in every free block of the caching allocator on `device` (the
    current one by default) and in a block of at least `nbytes`, so that whatever the next
    allocations get holds `fill` unless they outgrow that.

    One large filled tensor is not enough: best fit hands an output any smaller free block that
    fits (stale data from earlier tensors, or a fresh cudaMalloc's zeros) before the filled one,
    and outputs of at most 1 MiB (every LSE of the tests) come from the small pool, which a large
    tensor never touches. So the `nbytes` block is taken first, then every free block
    (torch.cuda.memory_snapshot) by a request of its own size, largest first, so that best fit
    gives each request a block of exactly that size (small-pool blocks in pieces of at most
    1 MiB); all are filled, then freed together."""
    device = torch.device("cuda") if device is None else torch.device(device)
    index = torch.cuda.current_device() if device.index is None else device.index
    device = torch.device("cuda", index)

    def filled(size: int) -> torch.Tensor:
        return torch.full((size // 4,), fill, dtype=torch.float32, device=device)

    held = [filled(nbytes)]
    pieces = []
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device", index) != index:
            continue
        small = segment["segment_type"] == "small"
        for block in segment["blocks"]:
            if block["state"] != "inactive":
                continue
            size = block["size"]  # a multiple of 512 bytes, as every request is rounded
            while size > 0:
                piece = min(size, SMALL_POOL_MAX_BYTES) if small else size
                pieces.append(piece)
                size -= piece
    held += [filled(size) for size in sorted(pieces, reverse=True)]
    torch.cuda.synchronize(device)
    del held
