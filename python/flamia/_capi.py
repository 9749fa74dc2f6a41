"""ctypes mirror of include/flamia/flamia.h and the lazy loader of libflamia.so.

The structs below must match the C header field for field: ctypes lays them out with the
platform C ABI, and tests/python/test_capi.py compiles the header and compares every
offset. Nothing here imports torch, and nothing loads the library until `library()` is called,
so `import flamia` works on machines without the library or a GPU.
"""

from __future__ import annotations

import ctypes
import enum
import os
import pathlib
import threading

# ---- enums (C enums are 32-bit ints on every ABI flamia supports) -------------------------------


class Status(enum.IntEnum):
    OK = 0
    ERROR_INVALID_ARGUMENT = 1
    ERROR_UNSUPPORTED = 2
    ERROR_WORKSPACE = 3
    ERROR_CUDA = 4
    ERROR_INVALID_SEQLENS = 5
    ERROR_NO_DEVICE = 6


class ScaleMode(enum.IntEnum):
    EXACT = 0
    BLOCK32 = 1
    STATIC = 2


class Precision(enum.IntEnum):
    FP8 = 0
    FP8_BF16GRAD = 1


class KeySmoothing(enum.IntEnum):
    NONE = 0
    FIRST_KEY = 1
    VECTOR = 2


class ForwardQuantize(enum.IntEnum):
    AUTO = 0
    SEPARATE = 1
    FUSED = 2


# Python-facing spellings of the enums.
SCALE_MODES = {"exact": ScaleMode.EXACT, "block32": ScaleMode.BLOCK32,
               "static": ScaleMode.STATIC}
PRECISIONS = {"fp8": Precision.FP8, "fp8-bf16grad": Precision.FP8_BF16GRAD}
KEY_SMOOTHINGS = {"none": KeySmoothing.NONE, "first_key": KeySmoothing.FIRST_KEY,
                  "vector": KeySmoothing.VECTOR}
FORWARD_QUANTIZE = {"auto": ForwardQuantize.AUTO, "separate": ForwardQuantize.SEPARATE,
                    "fused": ForwardQuantize.FUSED}

_c_enum = ctypes.c_int
# The structs' pointer fields are plain addresses (c_void_p, the same ABI as the C API's typed
# pointers): the Python front fills them with tensors' data_ptr() ints, without ctypes casts.
_i32p = ctypes.c_void_p  # const int32_t*
_f32p = ctypes.c_void_p  # float* / const float*

# ---- structs -------------------------------------------------------------------------------------


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("token_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
    ]


class Problem(ctypes.Structure):
    _fields_ = [
        ("cu_seqlens_q", _i32p),
        ("cu_seqlens_k", _i32p),
        ("host_cu_seqlens_q", _i32p),
        ("host_cu_seqlens_k", _i32p),
        ("batch", ctypes.c_int32),
        ("total_q", ctypes.c_int32),
        ("total_k", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_kv", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("max_seqlen_q", ctypes.c_int32),
        ("max_seqlen_k", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("scale_mode", _c_enum),
        ("key_smoothing", _c_enum),
        ("key_smoothing_vector", _f32p),
        ("sliding_window", ctypes.c_int32),
        ("static_key_exponents", ctypes.c_void_p),  # const int8_t*
        ("static_value_exponents", ctypes.c_void_p),
    ]


class ForwardArgs(ctypes.Structure):
    _fields_ = [
        ("problem", Problem),
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("o", Tensor),
        ("lse", _f32p),
        ("softmax_stats", _f32p),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("stream", ctypes.c_void_p),
        ("quantize", _c_enum),
        ("saved_operands", ctypes.c_void_p),
        ("saved_operands_bytes", ctypes.c_size_t),
        ("kv_amax", _f32p),
    ]


class BackwardArgs(ctypes.Structure):
    _fields_ = [
        ("problem", Problem),
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("o", Tensor),
        ("d_o", Tensor),
        ("lse", _f32p),
        ("softmax_stats", _f32p),
        ("dq", Tensor),
        ("dk", Tensor),
        ("dv", Tensor),
        ("precision", _c_enum),
        ("deterministic", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("stream", ctypes.c_void_p),
        ("saved_operands", ctypes.c_void_p),
        ("saved_operands_bytes", ctypes.c_size_t),
    ]


# The workspace must be this aligned (flamia.h).
WORKSPACE_ALIGNMENT = 256

# ---- loading -------------------------------------------------------------------------------------

LIBRARY_ENV = "FLAMIA_LIBRARY"
_LIBRARY_NAME = "libflamia.so"
_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
INSTALL_HINT = ("build and install it with `scripts/install-python` from the repository root, or "
                f"point {LIBRARY_ENV} at a libflamia.so")


class LibraryNotFound(OSError):
    """libflamia.so could not be found or loaded."""


def candidate_paths() -> list[pathlib.Path]:
    """Where the library is looked for, in order: $FLAMIA_LIBRARY (when set, the only place),
    the package's _lib/ folder (filled by scripts/install-python), and build/ of the repository
    holding this package."""
    from_env = os.environ.get(LIBRARY_ENV)
    if from_env:
        return [pathlib.Path(from_env)]
    return [_PACKAGE_DIR / "_lib" / _LIBRARY_NAME,
            _PACKAGE_DIR.parent.parent / "build" / _LIBRARY_NAME]


def _declare(lib: ctypes.CDLL) -> None:
    fwd_p = ctypes.POINTER(ForwardArgs)
    bwd_p = ctypes.POINTER(BackwardArgs)
    size_p = ctypes.POINTER(ctypes.c_size_t)
    signatures = {
        "flamia_forward_workspace_size": ([fwd_p, size_p], _c_enum),
        "flamia_backward_workspace_size": ([bwd_p, size_p], _c_enum),
        "flamia_saved_operands_size": ([ctypes.POINTER(Problem), size_p], _c_enum),
        "flamia_forward": ([fwd_p], _c_enum),
        "flamia_backward": ([bwd_p], _c_enum),
        "flamia_check_device_status": ([ctypes.c_void_p, ctypes.c_void_p], _c_enum),
        "flamia_last_error_message": ([], ctypes.c_char_p),
        "flamia_status_name": ([_c_enum], ctypes.c_char_p),
        "flamia_describe_forward": ([fwd_p], ctypes.c_char_p),
    }
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(lib, name)  # AttributeError names a symbol the library lacks
        fn.argtypes = argtypes
        fn.restype = restype


_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_library_path: pathlib.Path | None = None


def library() -> ctypes.CDLL:
    """The loaded libflamia.so (loaded on first use; thread-safe)."""
    global _library, _library_path
    if _library is not None:
        return _library
    with _lock:
        if _library is not None:
            return _library
        tried = []
        for path in candidate_paths():
            if not path.is_file():
                tried.append(str(path))
                continue
            try:
                lib = ctypes.CDLL(str(path))
                _declare(lib)
            except (OSError, AttributeError) as exc:
                raise LibraryNotFound(f"cannot load {path}: {exc}") from exc
            _library, _library_path = lib, path
            return lib
        raise LibraryNotFound("libflamia.so not found; tried: " + "; ".join(tried) + ". " +
                              INSTALL_HINT)


def library_path() -> pathlib.Path | None:
    """The path the library was loaded from, or None when it is not loaded yet."""
    return _library_path


def _reset_for_tests() -> None:
    global _library, _library_path
    with _lock:
        _library, _library_path = None, None


# ---- errors --------------------------------------------------------------------------------------


class FlamiaError(RuntimeError):
    """A status other than FLAMIA_OK returned by the library; `status` holds it."""

    def __init__(self, function: str, status: int, message: str):
        self.function = function
        self.status = status
        name = status_name(status)
        super().__init__(f"{function} failed with {name}: {message or '(no message)'}")


def status_name(status: int) -> str:
    try:
        raw = library().flamia_status_name(int(status))
    except (LibraryNotFound, ctypes.ArgumentError):
        raw = None
    if raw:
        return raw.decode(errors="replace")
    try:
        return "FLAMIA_" + Status(status).name
    except ValueError:
        return f"status {status}"


def last_error_message() -> str:
    raw = library().flamia_last_error_message()
    return raw.decode(errors="replace") if raw else ""


def check(function: str, status: int) -> None:
    """Raises FlamiaError for a failed call; the message is flamia_last_error_message()."""
    if status != Status.OK:
        raise FlamiaError(function, status, last_error_message())
