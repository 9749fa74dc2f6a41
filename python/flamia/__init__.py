"""flamia: causally safe, microscaled FP8 attention for training (Hopper, sm_90a).

    import flamia
    out = flamia.attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, causal=True, scale_mode="exact")

flamia.flash_attn_interface has FlashAttention-2's functions with their exact signatures
(flash_attn_varlen_func, flash_attn_func and the qkv/kv-packed variants), for a swapped import.

The C library (libflamia.so) is loaded on first use, so importing this package, registering its
torch ops (torch.ops.flamia.fwd / bwd) and tracing them on fake or meta tensors work on machines
without the library or a GPU. Set FLAMIA_LIBRARY to choose the library, FLAMIA_LOG=1 to log which
kernel path runs, FLAMIA_CHECK_DEVICE=1 to synchronise after each call and report cu_seqlens
errors found on the device (debugging only; not during CUDA graph capture), and
FLAMIA_FORWARD_QUANTIZE=fused to quantize inside the forward kernel instead of in a separate pass
(the same outputs bit for bit; slower on every shape measured, for benchmarks: auto / separate
are the default).
"""

from . import _ops  # noqa: F401  (registers torch.ops.flamia.fwd and torch.ops.flamia.bwd)
from . import flash_attn_interface  # noqa: F401  (flamia.flash_attn_interface.*, as flash_attn's)
from ._capi import FlamiaError, LibraryNotFound, candidate_paths, library_path
from ._interface import attn_func, attn_varlen_func, explain, static_exponents
from ._static_scaling import StaticScaleHistory

__version__ = "0.1.0"

__all__ = [
    "attn_varlen_func",
    "attn_func",
    "explain",
    "static_exponents",
    "StaticScaleHistory",
    "FlamiaError",
    "LibraryNotFound",
    "library_path",
    "candidate_paths",
    "load_library",
]


def load_library():
    """Loads libflamia.so now (it is otherwise loaded on first use) and returns its path."""
    from . import _capi

    _capi.library()
    return _capi.library_path()
