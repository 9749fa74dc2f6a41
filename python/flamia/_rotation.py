"""Incoherent processing of Q·Kᵀ: an orthogonal rotation of q and k before they are quantized.

S = q kᵀ is unchanged by any orthogonal R applied to both (q R)(k R)ᵀ = q kᵀ, but E4M3's
rounding error of S is not: each element carries a relative error of ~2^-4, so the error of
S_ij is about sqrt(Σ_d q_d² k_d² ) / 16, which is as large as |S_ij| / 16 when q and k put their
weight on the same few channels (the outlier channels trained models grow, RoPE's slow pairs
among them) and about |q| |k| / (16 sqrt(D)) when the weight is spread. A randomised Hadamard
matrix spreads any channel over all D (FlashAttention-3's FP8 forward and QuIP# do the same).

R = diag(signs) · H_D with H_D the Sylvester Hadamard matrix (entries ±1) and fixed signs; its
normalisation 1/sqrt(D) is split into two powers of two, one on q and one on k
(2^-ceil(n/2) and 2^-floor(n/2) for D = 2^n), so every factor is exact in BF16 and the only
rounding the rotation adds is the BF16 rounding of q R and k R (2^-9 relative, ~30x below
E4M3's). Per token and head, so document locality and causality (numerics §2) are unchanged.
The rotation is done with torch matrix products around the flamia op, so autograd carries the
gradients back (dq = dq' Rᵀ 2^-a, dk = dk' Rᵀ 2^-b) and torch.compile traces it.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

ROTATIONS = ("none", "hadamard")

# Fixed, seed-free signs: bit d of a 64-bit constant pattern (repeated), so the rotation is
# identical on every machine and in every version.
_SIGN_PATTERN = 0x9E3779B97F4A7C15
_PATTERN_BITS = 64

_cache: dict[tuple, Tensor] = {}


def sylvester_hadamard(dim: int, device=None) -> Tensor:
    """H_dim with entries ±1 (float64) on `device`, H_dim H_dimᵀ = dim I; dim a power of two."""
    if dim < 1 or dim & (dim - 1):
        raise ValueError(f"qk_rotation='hadamard' needs a power-of-two head_dim, got {dim}")
    h = torch.ones(1, 1, dtype=torch.float64, device=device)
    while h.shape[0] < dim:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h


def rotation_signs(dim: int, device=None) -> Tensor:
    """±1 (float64) on `device`: -1 where bit d % 64 of the pattern is set. Built with device
    ops from the pattern's two 32-bit halves (no host tensor, so a compiled graph holds no CPU
    op or copy to the device)."""
    d = torch.arange(dim, dtype=torch.int64, device=device) % _PATTERN_BITS
    half_bits = _PATTERN_BITS // 2
    low, high = _SIGN_PATTERN & 0xFFFFFFFF, _SIGN_PATTERN >> half_bits
    word = torch.where(d >= half_bits, high, low)
    bits = torch.bitwise_and(torch.bitwise_right_shift(word, d % half_bits), 1)
    return (1 - 2 * bits).to(torch.float64)


def operand_scales(dim: int) -> tuple[float, float]:
    """(q's factor, k's factor): powers of two whose product is 1/dim."""
    n = dim.bit_length() - 1
    return 2.0 ** -((n + 1) // 2), 2.0 ** -(n // 2)


def rotation_matrices(dim: int, dtype: torch.dtype, device,
                      cacheable: bool = True) -> tuple[Tensor, Tensor]:
    """(R_q, R_k) in `dtype` on `device`: diag(signs) H_dim times q's / k's power-of-two factor,
    so that R_q R_kᵀ = I exactly. Real tensors are cached per (dim, dtype, device): built once,
    so a CUDA graph can capture the rotation; fake and meta ones (tracing) are built each time,
    with device ops only (a compiled graph rebuilds them in a few small kernels, no host op),
    and never mixed with the cached real ones."""
    key = (dim, dtype, str(device))
    pair = _cache.get(key) if cacheable else None
    if pair is None:
        signed = rotation_signs(dim, device)[:, None] * sylvester_hadamard(dim, device)
        q_factor, k_factor = operand_scales(dim)
        pair = torch.stack((signed * q_factor, signed * k_factor)).to(dtype=dtype)
        if cacheable:
            _cache[key] = pair
    return pair[0], pair[1]


def _is_real(t: Tensor) -> bool:
    return t.device.type != "meta" and not is_fake(t)


def _no_autocast(device: torch.device):
    """Autocast turned off on `device` (meta tensors have none)."""
    if device.type == "meta":
        return contextlib.nullcontext()
    return torch.autocast(device.type, enabled=False)


def check_rotation(qk_rotation) -> str:
    if not isinstance(qk_rotation, str) or qk_rotation not in ROTATIONS:
        raise ValueError(f"qk_rotation must be one of {ROTATIONS}, got {qk_rotation!r}")
    return qk_rotation


def rotate_qk(q: Tensor, k: Tensor, qk_rotation: str) -> tuple[Tensor, Tensor]:
    """(q R_q, k R_k) over the last dimension (differentiable), or (q, k) for "none"."""
    if qk_rotation == "none":
        return q, k
    r_q, r_k = rotation_matrices(q.shape[-1], q.dtype, q.device, cacheable=_is_real(q))
    # q's dtype (BF16) under any autocast: the kernels read the products as BF16, unchecked.
    with _no_autocast(q.device):
        return torch.matmul(q, r_q), torch.matmul(k, r_k)


def rotate_key_vector(vector: Tensor, qk_rotation: str) -> Tensor:
    """A key-smoothing vector (heads_kv, D) float32 in the rotated keys' basis."""
    if qk_rotation == "none":
        return vector
    _, r_k = rotation_matrices(vector.shape[-1], torch.float32, vector.device,
                               cacheable=_is_real(vector))
    with _no_autocast(vector.device):  # stays FP32 under autocast
        return torch.matmul(vector, r_k).contiguous()
