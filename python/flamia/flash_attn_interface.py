"""FlashAttention-2's functions with their signatures, positional order included, on flamia's
kernels. Swap the import and existing calls run in FP8:

    # from flash_attn import flash_attn_varlen_func, flash_attn_func
    from flamia.flash_attn_interface import flash_attn_varlen_func, flash_attn_func

    out = flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                 max_seqlen_k, 0.0, softmax_scale, True)  # dropout_p, scale, causal

Arguments flamia does not implement (dropout_p, softcap, alibi_slopes, block_table, a window
that reaches later keys) are accepted at their neutral values and rejected otherwise with a
ValueError naming them, as in flamia.attn_varlen_func. causal and window_size are read as
FlashAttention-2 reads them (csrc/flash_attn/flash_api.cpp): a window side at least seqlen_k
(varlen: max_seqlen_k) long is unlimited, a single query row (seqlen_q or max_seqlen_q 1) is
not causal (bottom-right alignment: it sees every key), and causal=True makes the right side 0,
so window_size=(w, w) with causal=True is a causal window of w + 1 keys; (-1, 0) means causal.

Each function returns out alone, or with return_attn_probs=True (out, softmax_lse, None) as
FlashAttention-2 does without dropout (it returns no probabilities then either): softmax_lse
FP32 in natural log, (heads_q, total_q) from the varlen functions and (batch, heads_q,
seqlen_q) from the others, without gradient; a row with no visible key has -inf (FlashAttention
writes +inf there). flamia's own options (scale_mode, precision, key_smoothing, qk_rotation)
are keyword-only after FlashAttention's arguments.

The packed variants read qkv (total, 3, heads, head_dim) and kv (total, 2, heads_kv, head_dim) in
place, through strided views (no copy); gradients flow back into the packed tensor.
"""

from __future__ import annotations

from torch import Tensor

from . import _checks, _interface

__all__ = [
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
]


def flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                           cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *, scale_mode="exact",
                           precision="fp8", key_smoothing="none", qk_rotation="none") -> Tensor:
    """flash_attn.flash_attn_varlen_func: q (total_q, heads_q, head_dim), k and v
    (total_k, heads_kv, head_dim), int32 cu_seqlens of batch + 1 entries."""
    return_lse = _checks._check_bool("return_attn_probs", return_attn_probs)
    causal, window_size = _fa2_mask(causal, window_size, max_seqlen_q, max_seqlen_k,
                                    alibi_slopes)
    result = _interface.attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=dropout_p,
        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
        alibi_slopes=alibi_slopes, deterministic=deterministic, return_lse=return_lse,
        block_table=block_table, scale_mode=scale_mode, precision=precision,
        key_smoothing=key_smoothing, qk_rotation=qk_rotation)
    return (*result, None) if return_lse else result


def flash_attn_varlen_qkvpacked_func(qkv: Tensor, cu_seqlens: Tensor, max_seqlen: int,
                                     dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                     deterministic=False, return_attn_probs=False, *,
                                     scale_mode="exact", precision="fp8", key_smoothing="none",
                                     qk_rotation="none") -> Tensor:
    """flash_attn.flash_attn_varlen_qkvpacked_func: qkv (total, 3, heads, head_dim)."""
    _check_packed("qkv", qkv, parts=3, dims=4)
    q, k, v = qkv.unbind(1)
    return flash_attn_varlen_func(
        q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
        window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
        **_options(scale_mode, precision, key_smoothing, qk_rotation))


def flash_attn_varlen_kvpacked_func(q: Tensor, kv: Tensor, cu_seqlens_q: Tensor,
                                    cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p=0.0, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                    deterministic=False, return_attn_probs=False, *,
                                    scale_mode="exact", precision="fp8", key_smoothing="none",
                                    qk_rotation="none") -> Tensor:
    """flash_attn.flash_attn_varlen_kvpacked_func: kv (total_k, 2, heads_kv, head_dim)."""
    _check_packed("kv", kv, parts=2, dims=4)
    k, v = kv.unbind(1)
    return flash_attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
        softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
        return_attn_probs, **_options(scale_mode, precision, key_smoothing, qk_rotation))


def flash_attn_func(q: Tensor, k: Tensor, v: Tensor, dropout_p=0.0, softmax_scale=None,
                    causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    deterministic=False, return_attn_probs=False, *, scale_mode="exact",
                    precision="fp8", key_smoothing="none", qk_rotation="none") -> Tensor:
    """flash_attn.flash_attn_func: q (batch, seqlen_q, heads_q, head_dim), k and v
    (batch, seqlen_k, heads_kv, head_dim)."""
    return_lse = _checks._check_bool("return_attn_probs", return_attn_probs)
    if all(isinstance(t, Tensor) and t.dim() == 4 for t in (q, k)):  # else attn_func says why
        causal, window_size = _fa2_mask(causal, window_size, q.shape[1], k.shape[1],
                                        alibi_slopes)
    result = _interface.attn_func(
        q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
        window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
        deterministic=deterministic, return_lse=return_lse, scale_mode=scale_mode,
        precision=precision, key_smoothing=key_smoothing, qk_rotation=qk_rotation)
    return (*result, None) if return_lse else result


def flash_attn_qkvpacked_func(qkv: Tensor, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, *, scale_mode="exact",
                              precision="fp8", key_smoothing="none",
                              qk_rotation="none") -> Tensor:
    """flash_attn.flash_attn_qkvpacked_func: qkv (batch, seqlen, 3, heads, head_dim)."""
    _check_packed("qkv", qkv, parts=3, dims=5)
    q, k, v = qkv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs,
                           **_options(scale_mode, precision, key_smoothing, qk_rotation))


def flash_attn_kvpacked_func(q: Tensor, kv: Tensor, dropout_p=0.0, softmax_scale=None,
                             causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False, *, scale_mode="exact",
                             precision="fp8", key_smoothing="none",
                             qk_rotation="none") -> Tensor:
    """flash_attn.flash_attn_kvpacked_func: kv (batch, seqlen_k, 2, heads_kv, head_dim)."""
    _check_packed("kv", kv, parts=2, dims=5)
    k, v = kv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs,
                           **_options(scale_mode, precision, key_smoothing, qk_rotation))


def _fa2_mask(causal, window_size, seqlen_q, seqlen_k, alibi_slopes):
    """(causal, window_size) as FlashAttention-2's flash_api.cpp normalises them before its
    kernels: a side >= seqlen_k becomes -1 (unlimited), seqlen_q == 1 without ALiBi is not
    causal, and causal=True sets the right side to 0. Values of the wrong type go on unchanged,
    for flamia's checks to name."""
    if (not isinstance(causal, bool) or not _checks._is_int(seqlen_q)
            or not _checks._is_int(seqlen_k) or not isinstance(window_size, (tuple, list))
            or len(window_size) != 2 or not all(_checks._is_int(w) for w in window_size)):
        return causal, window_size
    left, right = (-1 if w >= seqlen_k else w for w in window_size)
    if seqlen_q == 1 and alibi_slopes is None:
        causal = False
    if causal:
        right = 0
    return causal, (left, right)


def _options(scale_mode, precision, key_smoothing, qk_rotation) -> dict:
    """flamia's own keyword options, passed on by the packed variants."""
    return dict(scale_mode=scale_mode, precision=precision, key_smoothing=key_smoothing,
                qk_rotation=qk_rotation)


def _check_packed(name: str, t, parts: int, dims: int) -> None:
    """A packed tensor of `dims` dimensions whose packing axis (the third from the end) holds
    `parts` tensors."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != dims or t.shape[-3] != parts:
        layout = ("(total, " if dims == 4 else "(batch, seqlen, ") + f"{parts}, heads, head_dim)"
        raise ValueError(f"{name} must have shape {layout}, got {tuple(t.shape)}")
