"""Argument checks, run before anything reaches the library.

Every check reads only shapes, dtypes, devices, strides and Python values, never tensor contents,
so it costs no host synchronisation and runs unchanged under torch.compile (on fake tensors) and
during CUDA graph capture. Contents of cu_seqlens are checked by the library on the device.

Errors: TypeError for a wrong type or dtype, ValueError for a wrong value, shape, device or
layout; each message starts with the argument's name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from . import _capi

SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_DTYPES = (torch.bfloat16,)
# "meta" tensors carry shapes only: accepted so that shapes can be propagated without a GPU.
ACCEPTED_DEVICE_TYPES = ("cuda", "meta")
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Spec:
    """The validated, normalised non-tensor arguments of one call."""
    softmax_scale: float
    causal: bool
    scale_mode: str
    precision: str
    deterministic: bool
    key_smoothing: str  # "none", "first_key" or "vector"
    key_smoothing_vector: Optional[torch.Tensor]
    static_exponents: Optional[torch.Tensor] = None  # scale_mode "static": int8 (2, heads_kv)


def _is_int(x) -> bool:
    return isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool)


def _check_count(name: str, value, minimum: int) -> int:
    """An int (not a bool) of at least `minimum` (0 or 1), else ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive int" if minimum == 1 else "a non-negative int"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return value


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _check_choice(name: str, value, choices) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {sorted(choices)}; "
                        f"got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; choose one of {sorted(choices)}")
    return value


def _check_device(name: str, t: torch.Tensor, device: Optional[torch.device]) -> None:
    if t.device.type not in ACCEPTED_DEVICE_TYPES:
        raise ValueError(f"{name} is on device '{t.device}'; flamia needs CUDA tensors "
                         "(an sm_90 GPU)")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}; all tensors must be on "
                         "the same device")


def _check_qkv(name: str, t, device: Optional[torch.device]) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {t.dtype}; flamia takes torch.bfloat16 inputs "
                        "(cast with .to(torch.bfloat16))")
    if t.dim() != 3:
        raise ValueError(f"{name} must have shape (total_tokens, heads, head_dim), got "
                         f"{tuple(t.shape)}")
    _check_device(name, t, device)
    if t.shape[2] not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"{name} has head_dim {t.shape[2]}; flamia supports head_dim "
                         f"{' and '.join(map(str, SUPPORTED_HEAD_DIMS))}")
    if t.shape[1] < 1:
        raise ValueError(f"{name} has no heads (shape {tuple(t.shape)})")
    if t.shape[0] > INT32_MAX:
        raise ValueError(f"{name} has {t.shape[0]} tokens; at most {INT32_MAX} are supported")
    if t.shape[2] > 1 and t.stride(2) != 1:
        raise ValueError(f"{name} must be contiguous in its last (head_dim) dimension, got "
                         f"strides {t.stride()}; call .contiguous() first")
    if t.stride(0) < 0 or t.stride(1) < 0:
        raise ValueError(f"{name} has negative strides {t.stride()}")


def _check_cu_seqlens(name: str, t, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of dtype torch.int32, got "
                        f"{type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} has dtype {t.dtype}; it must be torch.int32 "
                        "(cumulative document lengths, batch + 1 entries)")
    if t.dim() != 1 or t.shape[0] < 2:
        raise ValueError(f"{name} must be 1-D with batch + 1 >= 2 entries, got shape "
                         f"{tuple(t.shape)}")
    _check_device(name, t, device)
    if t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous (stride {t.stride(0)})")


def _check_max_seqlen(name: str, value, total: int) -> None:
    if isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a Python int; a tensor would force a host "
                        "synchronisation (.item()) on every call")
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0 or value > INT32_MAX:
        raise ValueError(f"{name}={value} is out of range [0, {INT32_MAX}]")
    if total > 0 and value == 0:
        raise ValueError(f"{name}=0 but there are {total} tokens; pass the longest document's "
                         "length")


def check_flash_attention_neutral(*, dropout_p, window_size, softcap, alibi_slopes,
                                  return_attn_probs, block_table, causal) -> tuple[bool, int]:
    """FlashAttention arguments flamia accepts only at their neutral values, and window_size.

    Returns (causal, sliding_window). window_size = (left, right) as FlashAttention reads it: a
    negative side is unlimited; right = 0 (or causal=True, which FlashAttention treats as
    right = 0) is causal; left >= 0 with a causal right side is a sliding window of left + 1
    keys (the library's sliding_window). A window that reaches later keys is not supported."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float, got {type(dropout_p).__name__}")
    if dropout_p != 0:
        raise ValueError(f"dropout_p={dropout_p} is not supported: flamia has no attention "
                         "dropout (pass dropout_p=0.0)")
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or not all(_is_int(w) for w in window_size)):
        raise TypeError(f"window_size must be a pair of ints, got {window_size!r}")
    left, right = window_size
    if right == 0:
        causal = True
    elif right > 0:
        raise ValueError(f"window_size={tuple(window_size)} is not supported: flamia's sliding "
                         "window is causal (use (left, 0), (-1, 0) for causal, or (-1, -1))")
    sliding_window = 0
    if left >= 0:
        if not causal:
            raise ValueError(f"window_size={tuple(window_size)} without causal is not supported: "
                             "flamia's sliding window is causal (use (left, 0) or causal=True)")
        # (capped: a window of INT32_MAX keys covers any document; the C field is int32)
        sliding_window = min(int(left) + 1, INT32_MAX)
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap must be a float, got {type(softcap).__name__}")
    if softcap != 0:
        raise ValueError(f"softcap={softcap} is not supported: flamia has no logit soft-capping "
                         "(pass softcap=0.0)")
    if alibi_slopes is not None:
        raise ValueError("alibi_slopes is not supported: flamia has no ALiBi bias "
                         "(pass alibi_slopes=None)")
    if return_attn_probs:
        raise ValueError("return_attn_probs=True is not supported: flamia never materialises "
                         "the attention matrix (use return_lse=True for the log-sum-exp)")
    if block_table is not None:
        raise ValueError("block_table is not supported: flamia has no paged KV cache "
                         "(pass block_table=None)")
    return causal, sliding_window


def _check_key_smoothing(key_smoothing, k: torch.Tensor):
    if isinstance(key_smoothing, torch.Tensor):
        vec = key_smoothing
        if vec.dtype != torch.float32:
            raise TypeError(f"key_smoothing (a vector) has dtype {vec.dtype}; it must be "
                            "torch.float32")
        expected = (k.shape[1], k.shape[2])
        if tuple(vec.shape) != expected:
            raise ValueError(f"key_smoothing (a vector) must have shape (heads_kv, head_dim) = "
                             f"{expected}, got {tuple(vec.shape)}")
        _check_device("key_smoothing", vec, k.device)
        if not vec.is_contiguous():
            raise ValueError("key_smoothing (a vector) must be contiguous")
        return "vector", vec
    if not isinstance(key_smoothing, str):
        raise TypeError("key_smoothing must be 'none', 'first_key' or a float32 tensor of shape "
                        f"(heads_kv, head_dim), got {type(key_smoothing).__name__}")
    if key_smoothing == "vector":
        raise ValueError("key_smoothing='vector': pass the vector itself, a float32 tensor of "
                         "shape (heads_kv, head_dim)")
    choices = {"none", "first_key"}
    if key_smoothing not in choices:
        raise ValueError(f"key_smoothing={key_smoothing!r} is not supported; choose 'none', "
                         "'first_key' or pass a (heads_kv, head_dim) float32 tensor")
    return key_smoothing, None


def _check_static_exponents(scale_mode: str, static_exponents, k) -> Optional[torch.Tensor]:
    """scale_mode "static" needs static_exponents: an int8 tensor of shape (2, heads_kv) on k's
    device (row 0: K's power-of-two exponent per KV head, row 1: V's); other modes take none."""
    if scale_mode != "static":
        if static_exponents is not None:
            raise ValueError(f"static_exponents is set but scale_mode={scale_mode!r}; they are "
                             "used only with scale_mode='static'")
        return None
    if hasattr(static_exponents, "_forward_exponents"):  # a StaticScaleHistory: the call's own
        return None
    if not isinstance(static_exponents, torch.Tensor):
        raise TypeError("scale_mode='static' needs static_exponents, an int8 tensor of shape "
                        f"(2, heads_kv) (K's and V's exponents) or a StaticScaleHistory, got "
                        f"{type(static_exponents).__name__}")
    heads_kv = k.shape[1]
    if static_exponents.dtype != torch.int8 or tuple(static_exponents.shape) != (2, heads_kv):
        raise ValueError(f"static_exponents must be an int8 tensor of shape (2, {heads_kv}), got "
                         f"{static_exponents.dtype} {tuple(static_exponents.shape)}")
    if static_exponents.device != k.device:
        raise ValueError(f"static_exponents is on {static_exponents.device} but k is on "
                         f"{k.device}")
    return static_exponents.contiguous()


def check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                 softmax_scale, causal, scale_mode, precision, deterministic,
                 key_smoothing, static_exponents=None) -> Spec:
    """Checks the arguments of attn_varlen_func; returns the normalised non-tensor ones."""
    _check_qkv("q", q, None)
    device = q.device
    _check_qkv("k", k, device)
    _check_qkv("v", v, device)
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)}")
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"q has head_dim {q.shape[2]} but k has {k.shape[2]}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"q has {q.shape[1]} heads, not a multiple of k's {k.shape[1]} heads "
                         "(GQA needs heads_q % heads_kv == 0)")
    _check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, device)
    _check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, device)
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(f"cu_seqlens_q has {cu_seqlens_q.shape[0]} entries but cu_seqlens_k has "
                         f"{cu_seqlens_k.shape[0]}; both must have batch + 1")
    _check_max_seqlen("max_seqlen_q", max_seqlen_q, q.shape[0])
    _check_max_seqlen("max_seqlen_k", max_seqlen_k, k.shape[0])
    causal = _check_bool("causal", causal)
    if causal and q.shape[0] != k.shape[0]:
        raise ValueError(f"causal=True needs equal query and key lengths per document, but q has "
                         f"{q.shape[0]} tokens and k has {k.shape[0]}")
    if softmax_scale is None:
        # Compared with each supported value so that the default is a plain float even when
        # torch.compile treats the head dim as symbolic.
        softmax_scale = next(1.0 / math.sqrt(d) for d in SUPPORTED_HEAD_DIMS if q.shape[2] == d)
    elif isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
        raise TypeError(f"softmax_scale must be a float or None, got "
                        f"{type(softmax_scale).__name__}")
    softmax_scale = float(softmax_scale)
    if not math.isfinite(softmax_scale) or softmax_scale <= 0:
        raise ValueError(f"softmax_scale={softmax_scale} must be finite and positive")
    scale_mode = _check_choice("scale_mode", scale_mode, _capi.SCALE_MODES)
    precision = _check_choice("precision", precision, _capi.PRECISIONS)
    deterministic = _check_bool("deterministic", deterministic)
    smoothing, vector = _check_key_smoothing(key_smoothing, k)
    exponents = _check_static_exponents(scale_mode, static_exponents, k)
    return Spec(softmax_scale, causal, scale_mode, precision, deterministic, smoothing, vector,
                exponents)


def check_batched(q, k, v) -> None:
    """Checks the (batch, seqlen, heads, head_dim) layout of attn_func's inputs."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (batch, seqlen, heads, head_dim), got "
                             f"{tuple(t.shape)}")
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise ValueError(f"q, k and v must have the same batch size, got {q.shape[0]}, "
                         f"{k.shape[0]} and {v.shape[0]}")
    if k.shape != v.shape:  # (before they are flattened with k's seqlen)
        raise ValueError(f"k and v must have the same shape, got k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)}")
