"""torch.library custom ops over the C API: flamia::fwd and flamia::bwd, and the training pair
flamia::fwd_saving and flamia::bwd_saved (the forward keeps its quantized Q, K, V in a buffer
it returns, and the backward reads them instead of q, k, v: flamia.h, saved_operands).

Each op has a fake (meta) implementation giving its output shapes, so torch.compile traces it
without a graph break, and each forward registers its autograd formula through its backward op.
The real implementations allocate outputs and the workspace with torch.empty (the caching
allocator, so CUDA graph capture works), pass torch's current stream, and never synchronise.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
from typing import Optional

import torch
from torch import Tensor

from . import _capi

log = logging.getLogger("flamia")

LOG_ENV = "FLAMIA_LOG"  # 1: log, once per distinct path, which kernel path ran
CHECK_ENV = "FLAMIA_CHECK_DEVICE"  # 1: synchronise after each call and report device errors
# auto (default), separate or fused: where the forward quantizes Q, K and V (the outputs are the
# same bit for bit; benchmarks set it to measure both paths)
QUANTIZE_ENV = "FLAMIA_FORWARD_QUANTIZE"
# 0: the training forward does not keep its quantized Q, K, V (the backward keeps q, k, v and
# quantizes them again: less memory when q, k, v stay alive anyway, e.g. views of a projection
# another op saves; same bits either way)
KEEP_OPERANDS_ENV = "FLAMIA_KEEP_OPERANDS"
_STATS_PER_ROW = 2  # softmax_stats holds {M, l} per (head, query)
_KV_AMAX_ROWS = 2  # kv_amax holds K's, then V's amax per KV head
_BF16 = torch.bfloat16


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


# ---- marshalling ---------------------------------------------------------------------------------


def _ptr(t: Optional[Tensor]) -> Optional[int]:
    """t's data address for a pointer field of the C structs; None (NULL) for None."""
    return None if t is None else t.data_ptr()


def _tensor(t: Tensor) -> _capi.Tensor:
    return _capi.Tensor(t.data_ptr(), t.stride(0), t.stride(1))


def _stream(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


def make_problem(q: Tensor, k: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                 max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool,
                 scale_mode: str, key_smoothing: str, key_smoothing_vector: Optional[Tensor],
                 sliding_window: int = 0,
                 static_exponents: Optional[Tensor] = None) -> _capi.Problem:
    """static_exponents: scale_mode "static"'s int8 (2, heads_kv) device tensor, row 0 K's
    exponents, row 1 V's (contiguous)."""
    static_key = _ptr(static_exponents)
    static_value = None if static_key is None else static_key + k.shape[1]
    return _capi.Problem(
        cu_seqlens_q=_ptr(cu_seqlens_q),
        cu_seqlens_k=_ptr(cu_seqlens_k),
        host_cu_seqlens_q=None,
        host_cu_seqlens_k=None,
        batch=cu_seqlens_q.shape[0] - 1,
        total_q=q.shape[0],
        total_k=k.shape[0],
        heads_q=q.shape[1],
        heads_kv=k.shape[1],
        head_dim=q.shape[2],
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        softmax_scale=softmax_scale,
        causal=int(causal),
        scale_mode=_capi.SCALE_MODES[scale_mode],
        key_smoothing=_capi.KEY_SMOOTHINGS[key_smoothing],
        key_smoothing_vector=_ptr(key_smoothing_vector),
        sliding_window=sliding_window,
        static_key_exponents=static_key,
        static_value_exponents=static_value,
    )


def _forward_quantize() -> int:
    name = os.environ.get(QUANTIZE_ENV, "") or "auto"
    if name not in _capi.FORWARD_QUANTIZE:
        raise ValueError(f"{QUANTIZE_ENV}={name!r}: expected one of "
                         f"{', '.join(_capi.FORWARD_QUANTIZE)}")
    return _capi.FORWARD_QUANTIZE[name]


def make_forward_args(q, k, v, out, lse, stats, problem: _capi.Problem,
                      stream: int,
                      saved: Optional[Tensor] = None,
                      kv_amax: Optional[Tensor] = None) -> _capi.ForwardArgs:
    saved_ptr, saved_bytes = _saved_pointer(saved)
    return _capi.ForwardArgs(problem=problem, q=_tensor(q), k=_tensor(k), v=_tensor(v),
                             o=_tensor(out), lse=_ptr(lse),
                             softmax_stats=_ptr(stats), workspace=None,
                             workspace_bytes=0, stream=stream, quantize=_forward_quantize(),
                             saved_operands=saved_ptr, saved_operands_bytes=saved_bytes,
                             kv_amax=_ptr(kv_amax))


def make_backward_args(dout, q, k, v, out, lse, stats, dq, dk, dv, problem: _capi.Problem,
                       precision: str, deterministic: bool, stream: int,
                       saved: Optional[Tensor] = None) -> _capi.BackwardArgs:
    """q, k and v may be None when `saved` (the forward's saved operands) is given."""
    saved_ptr, saved_bytes = _saved_pointer(saved)
    unread = _capi.Tensor(None, 0, 0)
    return _capi.BackwardArgs(
        problem=problem, q=unread if q is None else _tensor(q),
        k=unread if k is None else _tensor(k), v=unread if v is None else _tensor(v),
        o=_tensor(out), d_o=_tensor(dout), lse=_ptr(lse), softmax_stats=_ptr(stats),
        dq=_tensor(dq), dk=_tensor(dk), dv=_tensor(dv), precision=_capi.PRECISIONS[precision],
        deterministic=int(deterministic), workspace=None, workspace_bytes=0, stream=stream,
        saved_operands=saved_ptr, saved_operands_bytes=saved_bytes)


def _workspace(nbytes: int, device: torch.device) -> tuple[Tensor, int]:
    """A workspace of `nbytes` from the caching allocator, 256-byte aligned."""
    align = _capi.WORKSPACE_ALIGNMENT
    buf = torch.empty(max(nbytes, 1) + align, dtype=torch.uint8, device=device)
    offset = (-buf.data_ptr()) % align
    return buf, buf.data_ptr() + offset


# ---- saved operands ------------------------------------------------------------------------------

_PERMUTATION_GROUP = 16  # token-major copies pad their tokens to a multiple of this


def _aligned(nbytes):
    align = _capi.WORKSPACE_ALIGNMENT
    return (nbytes + align - 1) // align * align


def saved_operands_bytes(total_q, total_k, heads_q: int, heads_kv: int, head_dim: int):
    """flamia_saved_operands_size, computed here so that fake tensors (and torch.compile's
    symbolic sizes) know the buffer's size; the tests compare it with the library's. The
    buffer (saved_operands.h): a 256-byte header, then Q̂, K̂, V̂ᵀ (values, exponents), Q̂ᵀ
    (values), K̂cᵀ (values, exponents), V̂ (values), each 256-byte aligned."""
    padded_q = (total_q + _PERMUTATION_GROUP - 1) // _PERMUTATION_GROUP * _PERMUTATION_GROUP
    padded_k = (total_k + _PERMUTATION_GROUP - 1) // _PERMUTATION_GROUP * _PERMUTATION_GROUP
    q_rows, k_rows = total_q * heads_q * head_dim, total_k * heads_kv * head_dim
    q_columns, k_columns = padded_q * heads_q * head_dim, padded_k * heads_kv * head_dim
    q_exponents, k_exponents = total_q * heads_q, total_k * heads_kv
    parts = (q_rows, q_exponents, k_rows, k_exponents, k_columns, k_exponents,  # forward's
             q_columns, k_columns, k_exponents, k_rows)  # Q̂ᵀ, K̂cᵀ, V̂
    return _capi.WORKSPACE_ALIGNMENT + sum(_aligned(n) for n in parts)


def _saved_buffer(q: Tensor, k: Tensor) -> Tensor:
    """An uninitialised saved-operands buffer (torch's CUDA allocations are 512-byte aligned)."""
    total_q, heads_q, head_dim = q.shape
    total_k, heads_kv, _ = k.shape
    nbytes = saved_operands_bytes(total_q, total_k, heads_q, heads_kv, head_dim)
    return torch.empty(nbytes, dtype=torch.uint8, device=q.device)


def _saved_pointer(saved: Optional[Tensor]):
    """(pointer, bytes) of `saved`; (None, 0) for no buffer. Its start must stay 256-byte
    aligned (a hook that moves saved tensors could break that: refused, never shifted)."""
    if saved is None:
        return None, 0
    if saved.data_ptr() % _capi.WORKSPACE_ALIGNMENT != 0:
        raise ValueError(f"flamia: the saved-operands buffer at {saved.data_ptr():#x} is not "
                         f"{_capi.WORKSPACE_ALIGNMENT}-byte aligned (was it moved by a saved-"
                         "tensor hook?); set FLAMIA_KEEP_OPERANDS=0 to keep q, k, v instead")
    return saved.data_ptr(), saved.numel()


_logged: set = set()


def _log_path(description: str) -> None:
    if not _env_flag(LOG_ENV) or description in _logged:
        return
    _logged.add(description)
    if not log.handlers and not logging.getLogger().handlers:
        logging.basicConfig(format="%(name)s: %(message)s")
    log.setLevel(logging.INFO)
    log.info("%s", description)


def _check_device_status(lib, workspace_ptr: int, device: torch.device) -> None:
    """Debug mode: synchronise and surface what the device found (invalid cu_seqlens, an Inf in an
    input)."""
    if not _env_flag(CHECK_ENV) or torch.cuda.is_current_stream_capturing():
        return
    _capi.check("flamia_check_device_status",
                lib.flamia_check_device_status(ctypes.c_void_p(workspace_ptr), _stream(device)))


def workspace_bytes(args: _capi.ForwardArgs) -> int:
    """flamia_forward_workspace_size (which also validates the problem)."""
    nbytes = ctypes.c_size_t(0)
    _capi.check("flamia_forward_workspace_size",
                _capi.library().flamia_forward_workspace_size(ctypes.byref(args),
                                                              ctypes.byref(nbytes)))
    return nbytes.value


def describe_forward(args: _capi.ForwardArgs) -> str:
    raw = _capi.library().flamia_describe_forward(ctypes.byref(args))
    return raw.decode(errors="replace") if raw else ""


# ---- forward -------------------------------------------------------------------------------------


def _forward_outputs(q: Tensor):
    total_q, heads_q, _ = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=q.device)
    stats = torch.empty((heads_q, total_q, _STATS_PER_ROW), dtype=torch.float32, device=q.device)
    return out, lse, stats


def _kv_amax_output(k: Tensor, wanted: bool) -> Tensor:
    """flamia_forward_args.kv_amax: FP32 (2, heads_kv), K's then V's amax per KV head; an empty
    tensor when not wanted (the ops' outputs keep one structure)."""
    shape = (_KV_AMAX_ROWS, k.shape[1]) if wanted else (0,)
    return torch.empty(shape, dtype=torch.float32, device=k.device)


def _keys_values_amax(k: Tensor, v: Tensor, cu_seqlens_k: Tensor, key_smoothing: str,
                      key_smoothing_vector: Optional[Tensor]) -> Tensor:
    """kv_amax as the library's quantize pass measures it (max |k - m| and max |v| per KV head,
    NaNs ignored), in torch: for a forward without queries, which runs no quantize pass."""
    from ._static_scaling import keys_as_quantized  # (it imports this package's modules)
    keys = keys_as_quantized(k, cu_seqlens_k, key_smoothing, key_smoothing_vector)
    return torch.stack([t.detach().float().abs().nan_to_num(nan=0.0, posinf=math.inf)
                        .amax(dim=(0, 2)) for t in (keys, v)])


def _run_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 softmax_scale, causal, scale_mode, key_smoothing, key_smoothing_vector,
                 backward_description: str, saved: Optional[Tensor] = None,
                 sliding_window: int = 0, static_exponents: Optional[Tensor] = None,
                 kv_amax: bool = False):
    """(out, lse, stats, amax): amax is _kv_amax_output's."""
    out, lse, stats = _forward_outputs(q)
    amax = _kv_amax_output(k, kv_amax)
    if k.shape[0] == 0:  # no keys at all: every row is fully masked (O = 0, LSE = -inf)
        out.zero_()
        lse.fill_(-math.inf)
        stats.zero_()
        amax.zero_()
        return out, lse, stats, amax
    if q.shape[0] == 0:  # nothing to attend; the library refuses kv_amax without queries
        if kv_amax:
            amax.copy_(_keys_values_amax(k, v, cu_seqlens_k, key_smoothing,
                                         key_smoothing_vector))
        return out, lse, stats, amax
    lib = _capi.library()
    with torch.cuda.device(q.device):
        problem = make_problem(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale, causal, scale_mode, key_smoothing,
                               key_smoothing_vector, sliding_window, static_exponents)
        args = make_forward_args(q, k, v, out, lse, stats, problem, _stream(q.device), saved,
                                 amax if kv_amax else None)
        nbytes = workspace_bytes(args)
        workspace, workspace_ptr = _workspace(nbytes, q.device)
        args.workspace = workspace_ptr
        args.workspace_bytes = nbytes
        if _env_flag(LOG_ENV):
            _log_path(describe_forward(args) + f"; backward: {backward_description}")
        _capi.check("flamia_forward", lib.flamia_forward(ctypes.byref(args)))
        _check_device_status(lib, workspace_ptr, q.device)
    # `workspace` is returned to the caching allocator here: stream-ordered, so the kernels
    # queued above finish before any later user of the memory on this stream.
    del workspace
    return out, lse, stats, amax


def _backward_description(precision: str, deterministic: bool) -> str:
    return precision + (", deterministic" if deterministic else "")


@torch.library.custom_op("flamia::fwd", mutates_args=(), device_types="cuda")
def fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
        max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool,
        scale_mode: str, key_smoothing: str, key_smoothing_vector: Optional[Tensor],
        precision: str, deterministic: bool, sliding_window: int = 0,
        static_exponents: Optional[Tensor] = None,
        kv_amax: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Returns (out, lse, softmax_stats, amax). `precision` and `deterministic` are used only by
    the backward; they are inputs here so that autograd can hand them on. sliding_window: 0, or
    the W keys each causal query sees (flamia.h). amax: with kv_amax, FP32 (2, heads_kv), each
    KV head's max |k - m| (the keys as quantized) and max |v| (flamia_forward_args.kv_amax);
    else empty."""
    return _run_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, causal, scale_mode, key_smoothing, key_smoothing_vector,
                        _backward_description(precision, deterministic),
                        sliding_window=sliding_window, static_exponents=static_exponents,
                        kv_amax=kv_amax)


@fwd.register_fake
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
              causal, scale_mode, key_smoothing, key_smoothing_vector, precision, deterministic,
              sliding_window=0, static_exponents=None, kv_amax=False):
    return _forward_outputs(q) + (_kv_amax_output(k, kv_amax),)


@torch.library.custom_op("flamia::fwd_saving", mutates_args=(), device_types="cuda")
def fwd_saving(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
               max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool,
               scale_mode: str, key_smoothing: str, key_smoothing_vector: Optional[Tensor],
               deterministic: bool, sliding_window: int = 0,
               static_exponents: Optional[Tensor] = None,
               kv_amax: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The training forward of precision "fp8": returns (out, lse, softmax_stats, saved, amax),
    where `saved` holds the quantized Q, K, V in every layout the backward reads (uint8,
    saved_operands_bytes long; flamia::bwd_saved then reads no q, k, v) and amax is fwd's."""
    saved = _saved_buffer(q, k)
    out, lse, stats, amax = _run_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                         max_seqlen_k, softmax_scale, causal, scale_mode,
                                         key_smoothing, key_smoothing_vector,
                                         _backward_description("fp8", deterministic), saved,
                                         sliding_window, static_exponents, kv_amax)
    return out, lse, stats, saved, amax


@fwd_saving.register_fake
def _fwd_saving_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     softmax_scale, causal, scale_mode, key_smoothing, key_smoothing_vector,
                     deterministic, sliding_window=0, static_exponents=None, kv_amax=False):
    return _forward_outputs(q) + (_saved_buffer(q, k), _kv_amax_output(k, kv_amax))


# ---- backward ------------------------------------------------------------------------------------


_TENSOR_ALIGNMENT = 16  # bytes: of a flamia_tensor's data and strides (flamia.h)


def _readable(t: Tensor) -> Tensor:
    """t when the library can read it in place (head_dim contiguous; data, token and head
    strides 16-byte aligned, strides positive), else a contiguous copy. For dO, whose layout is
    autograd's: out.sum(1)'s gradient, for one, has head stride 0."""
    step = _TENSOR_ALIGNMENT // t.element_size()
    if (t.stride(2) == 1 and t.data_ptr() % _TENSOR_ALIGNMENT == 0
            and all(s > 0 and s % step == 0 for s in t.stride()[:2])):
        return t
    # (not .contiguous(): it keeps a size-1 dimension's stride, which may be 0)
    return t.clone(memory_format=torch.contiguous_format)


def _gradients(q_shape, k_shape, device):
    return (torch.empty(q_shape, dtype=_BF16, device=device),
            torch.empty(k_shape, dtype=_BF16, device=device),
            torch.empty(k_shape, dtype=_BF16, device=device))


def _run_backward(dout, q, k, v, out, lse, softmax_stats, cu_seqlens_q, cu_seqlens_k,
                  k_shape, max_seqlen_q, max_seqlen_k, softmax_scale, causal, scale_mode,
                  key_smoothing, key_smoothing_vector, precision, deterministic,
                  saved: Optional[Tensor] = None, sliding_window: int = 0,
                  static_exponents: Optional[Tensor] = None):
    """q, k, v may be None when `saved` is given (k_shape then sizes dk and dv)."""
    dq, dk, dv = _gradients(out.shape, k_shape, out.device)
    if out.shape[0] == 0 or k_shape[0] == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    dout = _readable(dout)
    lib = _capi.library()
    with torch.cuda.device(out.device):
        # Only the shapes of q and k enter the problem.
        keys = k if k is not None else torch.empty(k_shape, dtype=_BF16, device="meta")
        problem = make_problem(out, keys, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                               max_seqlen_k, softmax_scale, causal, scale_mode, key_smoothing,
                               key_smoothing_vector, sliding_window, static_exponents)
        args = make_backward_args(dout, q, k, v, out, lse, softmax_stats, dq, dk, dv, problem,
                                  precision, deterministic, _stream(out.device), saved)
        nbytes = ctypes.c_size_t(0)
        _capi.check("flamia_backward_workspace_size",
                    lib.flamia_backward_workspace_size(ctypes.byref(args), ctypes.byref(nbytes)))
        workspace, workspace_ptr = _workspace(nbytes.value, out.device)
        args.workspace = workspace_ptr
        args.workspace_bytes = nbytes.value
        _capi.check("flamia_backward", lib.flamia_backward(ctypes.byref(args)))
        _check_device_status(lib, workspace_ptr, out.device)
    del workspace
    return dq, dk, dv


@torch.library.custom_op("flamia::bwd", mutates_args=(), device_types="cuda")
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
        softmax_stats: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int,
        max_seqlen_k: int, softmax_scale: float, causal: bool, scale_mode: str,
        key_smoothing: str, key_smoothing_vector: Optional[Tensor], precision: str,
        deterministic: bool, sliding_window: int = 0,
        static_exponents: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    """Returns (dq, dk, dv), contiguous, shaped like q, k and v."""
    return _run_backward(dout, q, k, v, out, lse, softmax_stats, cu_seqlens_q, cu_seqlens_k,
                         k.shape, max_seqlen_q, max_seqlen_k, softmax_scale, causal, scale_mode,
                         key_smoothing, key_smoothing_vector, precision, deterministic,
                         sliding_window=sliding_window, static_exponents=static_exponents)


@bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, softmax_stats, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
              max_seqlen_k, softmax_scale, causal, scale_mode, key_smoothing,
              key_smoothing_vector, precision, deterministic, sliding_window=0,
              static_exponents=None):
    return _gradients(q.shape, k.shape, q.device)


@torch.library.custom_op("flamia::bwd_saved", mutates_args=(), device_types="cuda")
def bwd_saved(dout: Tensor, saved: Tensor, out: Tensor, lse: Tensor, softmax_stats: Tensor,
              cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, total_k: int, heads_kv: int,
              max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool,
              scale_mode: str, key_smoothing: str, key_smoothing_vector: Optional[Tensor],
              deterministic: bool, sliding_window: int = 0,
              static_exponents: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    """The backward of flamia::fwd_saving (precision "fp8"): (dq, dk, dv), dk and dv shaped
    (total_k, heads_kv, head_dim). The library checks on the device that `saved` was written
    for this problem."""
    k_shape = (total_k, heads_kv, out.shape[2])
    return _run_backward(dout, None, None, None, out, lse, softmax_stats, cu_seqlens_q,
                         cu_seqlens_k, k_shape, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                         scale_mode, key_smoothing, key_smoothing_vector, "fp8", deterministic,
                         saved, sliding_window, static_exponents)


@bwd_saved.register_fake
def _bwd_saved_fake(dout, saved, out, lse, softmax_stats, cu_seqlens_q, cu_seqlens_k, total_k,
                    heads_kv, max_seqlen_q, max_seqlen_k, softmax_scale, causal, scale_mode,
                    key_smoothing, key_smoothing_vector, deterministic, sliding_window=0,
                    static_exponents=None):
    return _gradients(out.shape, (total_k, heads_kv, out.shape[2]), out.device)


# ---- autograd ------------------------------------------------------------------------------------

def _no_zero_gradients(ctx) -> None:
    """Autograd would otherwise hand the backward a zero-filled gradient for every output that
    got none: the LSE, the statistics and the saved-operands buffer, whose 402 MB of zeros cost
    120 us per step on equal-2k (profile_forward_call.py --backward). They arrive as None, and
    a missing dO becomes zeros in the backward."""
    ctx.set_materialize_grads(False)


def _setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
     scale_mode, key_smoothing, key_smoothing_vector, precision, deterministic,
     sliding_window, static_exponents, _) = inputs  # (torch fills in the defaulted ones)
    out, lse, stats, amax = output
    ctx.save_for_backward(q, k, v, out, lse, stats, cu_seqlens_q, cu_seqlens_k,
                          key_smoothing_vector, static_exponents)
    ctx.config = dict(max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                      softmax_scale=softmax_scale, causal=causal, scale_mode=scale_mode,
                      key_smoothing=key_smoothing, precision=precision,
                      deterministic=deterministic, sliding_window=sliding_window)
    # Like FlashAttention's, the LSE carries no gradient; softmax_stats is internal.
    ctx.mark_non_differentiable(lse, stats, amax)
    _no_zero_gradients(ctx)


def _backward(ctx, dout, _dlse, _dstats, _damax):
    q, k, v, out, lse, stats, cu_seqlens_q, cu_seqlens_k, vector, exponents = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    c = ctx.config
    dq, dk, dv = torch.ops.flamia.bwd(
        dout, q, k, v, out, lse, stats, cu_seqlens_q, cu_seqlens_k, c["max_seqlen_q"],
        c["max_seqlen_k"], c["softmax_scale"], c["causal"], c["scale_mode"], c["key_smoothing"],
        vector, c["precision"], c["deterministic"], c["sliding_window"], exponents)
    return (dq, dk, dv) + (None,) * 14


fwd.register_autograd(_backward, setup_context=_setup_context)


def _setup_saving_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
     scale_mode, key_smoothing, key_smoothing_vector, deterministic,
     sliding_window, static_exponents, _) = inputs
    out, lse, stats, saved, amax = output
    # No q, k or v: the backward reads the quantized copies in `saved`, K̂ built with the
    # smoothing vector as it was at the forward (the vector is a constant, as documented).
    ctx.save_for_backward(saved, out, lse, stats, cu_seqlens_q, cu_seqlens_k,
                          key_smoothing_vector, static_exponents)
    ctx.config = dict(total_k=k.shape[0], heads_kv=k.shape[1], max_seqlen_q=max_seqlen_q,
                      max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=causal,
                      scale_mode=scale_mode, key_smoothing=key_smoothing,
                      deterministic=deterministic, sliding_window=sliding_window)
    ctx.mark_non_differentiable(lse, stats, saved, amax)
    _no_zero_gradients(ctx)


def _backward_saved(ctx, dout, _dlse, _dstats, _dsaved, _damax):
    saved, out, lse, stats, cu_seqlens_q, cu_seqlens_k, vector, exponents = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    c = ctx.config
    dq, dk, dv = torch.ops.flamia.bwd_saved(
        dout, saved, out, lse, stats, cu_seqlens_q, cu_seqlens_k, c["total_k"], c["heads_kv"],
        c["max_seqlen_q"], c["max_seqlen_k"], c["softmax_scale"], c["causal"], c["scale_mode"],
        c["key_smoothing"], vector, c["deterministic"], c["sliding_window"], exponents)
    return (dq, dk, dv) + (None,) * 13


fwd_saving.register_autograd(_backward_saved, setup_context=_setup_saving_context)


def forward_keeps_operands(precision: str, *tensors: Tensor) -> bool:
    """Whether the training pair (fwd_saving / bwd_saved) runs: precision "fp8", a gradient
    wanted, FLAMIA_KEEP_OPERANDS not 0, and the separate quantize pass (the fused one writes no
    copies to keep)."""
    return (precision == "fp8" and torch.is_grad_enabled()
            and any(t.requires_grad for t in tensors)
            and os.environ.get(KEEP_OPERANDS_ENV, "1") != "0"
            and _forward_quantize() != _capi.ForwardQuantize.FUSED)
