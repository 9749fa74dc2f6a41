"""The public, FlashAttention-shaped functions."""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from . import _capi, _checks, _ops, _rotation


def attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                     cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int, *,
                     softmax_scale=None, causal=False, scale_mode="exact", precision="fp8",
                     deterministic=False, return_lse=False, dropout_p=0.0,
                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                     key_smoothing="none", qk_rotation="none", return_attn_probs=False,
                     block_table=None, static_exponents=None):
    """FP8 attention over packed variable-length documents, forward and backward.

    q: (total_q, heads_q, head_dim), k and v: (total_k, heads_kv, head_dim), BF16 CUDA tensors
    with a contiguous last dimension, 16-byte aligned, and token and head strides positive
    multiples of 8 elements (any slice of a packed qkv; else FlamiaError); head_dim 64 or 128;
    heads_q a multiple of heads_kv (GQA/MQA). cu_seqlens_q/k: int32 (batch + 1,) on the same
    device. max_seqlen_q/k: Python ints (no host synchronisation is ever made).

    Every argument after max_seqlen_k is keyword-only: FlashAttention's positional order
    (dropout_p, softmax_scale, causal, ...) would otherwise be misread.

    softmax_scale: default 1/sqrt(head_dim). causal: a causal document must have equal query
    and key lengths (FlashAttention's bottom-right alignment of unequal ones is rejected as
    unsupported). scale_mode: "exact" (one FP8 scale per token and head: outputs are bitwise
    independent of later tokens), "block32" (per document-local 32-token block) or "static"
    (Q per token as "exact"; K and V one caller-supplied power-of-two scale per KV head, given
    as static_exponents, an int8 (2, heads_kv) tensor on the device: row 0 K's exponents e, K̂ =
    e4m3((k - m) 2^-e), row 1 V's; values beyond 448 * 2^e saturate, so choose e from a bound or
    an earlier step's amax: StaticScaleHistory per layer, or static_exponents(k_prev, v_prev,
    margin)). static_exponents may also be the layer's StaticScaleHistory itself: the call
    takes its exponents from it and records the amax the forward's quantize pass measures
    (flamia_forward_args.kv_amax, of the keys as quantized), so no extra pass reads K and V
    after the first call. Exactly causal (no scale
    depends on the data) and the fastest forward: its softmax reads no per-key factors).
    precision: backward precision, "fp8" (all products in FP8) or
    "fp8-bf16grad" (dP, dQ, dK in BF16: the precision that trained within 1% of BF16 attention
    in the pretraining example, at 0.95-1.19x fp8's forward+backward time; docs/results-log.md).
    deterministic: bitwise reproducible backward. When a gradient is wanted at precision "fp8",
    the forward keeps its quantized Q, K, V for the backward (autograd holds those FP8 copies,
    as many bytes as the BF16 q, k, v, instead of q, k, v; the backward then quantizes only dO;
    the same bits either way). FLAMIA_KEEP_OPERANDS=0 turns this off (for callers whose q, k, v
    stay alive anyway).
    key_smoothing: "none", "first_key" (subtract each document's first key) or a float32
    (heads_kv, head_dim) tensor to subtract (treated as a constant).
    qk_rotation: "none" or "hadamard": rotate q and k by the same randomised Hadamard matrix
    before they are quantized (q·k is unchanged; the FP8 error of Q·Kᵀ shrinks when q and k
    concentrate on a few channels; docs/numerics.md §4.2). Torch matrix products around the
    kernels, differentiable; about one extra read and write of q and k each way. The rotation
    matrices are built on the device at the first call of each (head_dim, device): make that
    call before capturing a CUDA graph.

    window_size: FlashAttention's; (-1, -1) none, (-1, 0) causal, (left, 0) (or causal=True with
    left >= 0) a causal sliding window: query i sees the keys of its document at positions
    i - left .. i. A window reaching later keys is rejected.

    FlashAttention arguments flamia does not implement (dropout_p, softcap, alibi_slopes,
    return_attn_probs, block_table) are accepted at their neutral values and rejected otherwise.

    Returns out (total_q, heads_q, head_dim) BF16, or (out, lse) with return_lse=True, lse FP32
    (heads_q, total_q) in natural log, -inf for rows with no visible key. Like FlashAttention's,
    the returned lse carries no gradient. It is the log-normalizer of the FP8 probabilities out
    was built from (docs/numerics.md §4: l sums the quantized P̂), so out and lse merge exactly
    (e.g. across context-parallel blocks); against exact softmax attention it carries P̂'s
    rounding: up to ln(1 + 1/8) on rows that see a single key, far less on rows that see many.
    """
    causal, sliding_window = _checks.check_flash_attention_neutral(
        dropout_p=dropout_p, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
        return_attn_probs=return_attn_probs, block_table=block_table, causal=causal)
    spec = _checks.check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                softmax_scale=softmax_scale, causal=causal,
                                scale_mode=scale_mode, precision=precision,
                                deterministic=deterministic, key_smoothing=key_smoothing,
                                static_exponents=static_exponents)
    return_lse = _checks._check_bool("return_lse", return_lse)
    rotation = _rotation.check_rotation(qk_rotation)
    q, k = _rotation.rotate_qk(q, k, rotation)
    smoothing_vector = spec.key_smoothing_vector
    if smoothing_vector is not None:
        smoothing_vector = _rotation.rotate_key_vector(smoothing_vector, rotation)
    exponents = spec.static_exponents
    history = _static_history(static_exponents) if spec.scale_mode == "static" else None
    # activation checkpointing's recomputed forward runs inside the backward's graph task (in
    # eager mode: a compiled graph's recomputation replays no Python, and dynamo cannot trace
    # the engine query)
    recomputing = (history is not None and not torch.compiler.is_compiling()
                   and torch._C._current_graph_task_id() != -1)
    if history is not None:  # the keys as the kernels quantize them: rotated, minus m
        exponents = history._forward_exponents(
            lambda: _static_scaling.keys_as_quantized(k, cu_seqlens_k, spec.key_smoothing,
                                                      smoothing_vector), v, recomputing)
    if _ops.forward_keeps_operands(spec.precision, q, k, v):
        # Training: the forward keeps its quantized Q, K, V and the backward reads them (no
        # q, k, v saved, no second quantization of them).
        out, lse, _, _, amax = torch.ops.flamia.fwd_saving(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, spec.softmax_scale,
            spec.causal, spec.scale_mode, spec.key_smoothing, smoothing_vector,
            spec.deterministic, sliding_window, exponents, history is not None)
    else:
        out, lse, _, amax = torch.ops.flamia.fwd(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                                 max_seqlen_q, max_seqlen_k, spec.softmax_scale,
                                                 spec.causal, spec.scale_mode, spec.key_smoothing,
                                                 smoothing_vector, spec.precision,
                                                 spec.deterministic, sliding_window,
                                                 exponents, history is not None)
    if history is not None and not recomputing:
        history._record_forward(amax, exponents)
    return (out, lse) if return_lse else out


def _static_history(static_exponents):
    """static_exponents when it is a StaticScaleHistory."""
    return static_exponents if isinstance(static_exponents, _static_scaling.StaticScaleHistory) \
        else None


def _uniform_cu_seqlens(batch: int, seqlen: int, device: torch.device) -> Tensor:
    # Built on the device (no host-to-device copy, so it is capturable in a CUDA graph).
    if seqlen == 0:  # (arange's step may not be 0)
        return torch.zeros(batch + 1, dtype=torch.int32, device=device)
    return torch.arange(0, (batch + 1) * seqlen, seqlen, dtype=torch.int32, device=device)


def attn_func(q: Tensor, k: Tensor, v: Tensor, *, softmax_scale=None, causal=False,
              scale_mode="exact", precision="fp8", deterministic=False, return_lse=False,
              dropout_p=0.0, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
              key_smoothing="none", qk_rotation="none", return_attn_probs=False,
              static_exponents=None):
    """attn_varlen_func for (batch, seqlen, heads, head_dim) tensors: each batch row is one
    document. Returns out (batch, seqlen_q, heads_q, head_dim), or (out, lse) with lse FP32
    (batch, heads_q, seqlen_q) as FlashAttention returns it. Every argument after v is
    keyword-only."""
    _checks.check_batched(q, k, v)
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k = k.shape[1]
    cu_seqlens_q = _uniform_cu_seqlens(batch, seqlen_q, q.device)
    cu_seqlens_k = (cu_seqlens_q if seqlen_k == seqlen_q
                    else _uniform_cu_seqlens(batch, seqlen_k, q.device))
    result = attn_varlen_func(
        q.reshape(batch * seqlen_q, heads_q, head_dim),
        k.reshape(batch * seqlen_k, k.shape[2], k.shape[3]),
        v.reshape(batch * seqlen_k, v.shape[2], v.shape[3]),
        cu_seqlens_q, cu_seqlens_k, seqlen_q, seqlen_k, softmax_scale=softmax_scale,
        causal=causal, scale_mode=scale_mode, precision=precision, deterministic=deterministic,
        return_lse=return_lse, dropout_p=dropout_p, window_size=window_size, softcap=softcap,
        alibi_slopes=alibi_slopes, key_smoothing=key_smoothing, qk_rotation=qk_rotation,
        return_attn_probs=return_attn_probs, static_exponents=static_exponents)
    if not return_lse:
        return result.view(batch, seqlen_q, heads_q, head_dim)
    out, lse = result
    lse = lse.view(heads_q, batch, seqlen_q).transpose(0, 1).contiguous()
    return out.view(batch, seqlen_q, heads_q, head_dim), lse


def explain(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
            max_seqlen_q: int, max_seqlen_k: int, *, softmax_scale=None, causal=False,
            scale_mode="exact", precision="fp8", deterministic=False, return_lse=False,
            dropout_p=0.0, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
            key_smoothing="none", qk_rotation="none", return_attn_probs=False,
            block_table=None, static_exponents=None) -> str:
    """Which kernel path attn_varlen_func would run for these arguments (the library's
    flamia_describe_forward; with a gradient wanted, the training forward that keeps its
    quantized operands), followed by the backward's precision. Runs no kernel. The same
    line is logged on the first call of each distinct path when FLAMIA_LOG=1."""
    causal, sliding_window = _checks.check_flash_attention_neutral(
        dropout_p=dropout_p, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
        return_attn_probs=return_attn_probs, block_table=block_table, causal=causal)
    spec = _checks.check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                softmax_scale=softmax_scale, causal=causal,
                                scale_mode=scale_mode, precision=precision,
                                deterministic=deterministic, key_smoothing=key_smoothing,
                                static_exponents=static_exponents)
    rotation = _rotation.check_rotation(qk_rotation)
    _capi.library()  # raise LibraryNotFound before building anything
    out, lse, stats = _ops._forward_outputs(q)
    problem = _ops.make_problem(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                spec.softmax_scale, spec.causal, spec.scale_mode,
                                spec.key_smoothing, spec.key_smoothing_vector, sliding_window,
                                spec.static_exponents)
    args = _ops.make_forward_args(q, k, v, out, lse, stats, problem, _ops._stream(q.device))
    if _ops.forward_keeps_operands(spec.precision, q, k, v):
        # The training forward's path. Never dereferenced: the description and the size query
        # read only whether a saved-operands buffer is given.
        args.saved_operands = ctypes.c_void_p(_capi.WORKSPACE_ALIGNMENT)
    # The size query validates the problem, so an unsupported one raises FlamiaError with the
    # library's reason instead of describing "no kernel path".
    _ops.workspace_bytes(args)
    backward = f"backward: {spec.precision}" + (", deterministic" if spec.deterministic else "")
    rotated = "" if rotation == "none" else f"; q and k rotated ({rotation})"
    return f"{_ops.describe_forward(args)}; {backward}{rotated}"


E4M3_MAX = 448.0
STATIC_EXPONENT_RANGE = (-126, 127)  # E8M0's (numerics §1); an int8 below -126 counts as -126


def key_value_amax(k: Tensor, v: Tensor) -> Tensor:
    """(2, heads_kv) FP32: K's and V's amax per KV head, from (tokens, heads_kv, head_dim) tensors
    or (heads_kv,) amax (taken as they are)."""
    amax = []
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() == 3:  # (tokens, heads_kv, head_dim); the inf-norm: one pass, no |t| copy
            t = (torch.linalg.vector_norm(t.detach(), ord=float("inf"), dim=(0, 2))
                 if t.shape[0] else t.new_zeros(t.shape[1]))
        elif t.dim() != 1:
            raise ValueError(f"{name} must be (tokens, heads_kv, head_dim) or a (heads_kv,) amax, "
                             f"got shape {tuple(t.shape)}")
        amax.append(t.float())
    if amax[0].shape != amax[1].shape:
        raise ValueError(f"k and v have {amax[0].shape[0]} and {amax[1].shape[0]} heads")
    return torch.stack(amax)


def static_exponents(k: Tensor, v: Tensor, margin: int = 0) -> Tensor:
    """scale_mode "static"'s exponents from K and V (or from their per-head amax, shaped
    (heads_kv,)): int8 (2, heads_kv) on their device, row 0 K's, row 1 V's, the smallest e per KV
    head with amax * 2^-e <= 448, plus `margin` binades of headroom. For delayed scaling, pass an
    earlier step's tensors or amax: exponents that depend on no token of this step keep the
    forward exactly causal (from this step's own K and V they would not: a later token could
    change an earlier one's scale). Runs on the device, no host synchronisation."""
    _checks._check_count("margin", margin, 0)
    amax = key_value_amax(k, v)
    e = torch.ceil(torch.log2(amax.clamp_min(2.0**-126) / E4M3_MAX)) + margin
    e = torch.where(amax > 0, e, float(STATIC_EXPONENT_RANGE[0]))  # an all-zero head: any e fits
    return e.clamp(*STATIC_EXPONENT_RANGE).to(torch.int8)


from . import _static_scaling  # noqa: E402  (it imports this module's helpers)
