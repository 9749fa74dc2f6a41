"""The ctypes layer: struct layouts against the C header, marshalling through a stub library,
status codes turned into exceptions, and library discovery (CPU only)."""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import pathlib
import re
import subprocess

import pytest
import torch

import flamia
from conftest import REPO, c_compiler
from flamia import _capi, _ops

C_NAMES = {
    _capi.Tensor: "flamia_tensor",
    _capi.Problem: "flamia_problem",
    _capi.ForwardArgs: "flamia_forward_args",
    _capi.BackwardArgs: "flamia_backward_args",
}


def test_struct_layouts_match_the_header(tmp_path):
    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) to compile include/flamia/flamia.h")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flamia/flamia.h"',
             "int main(void) {"]
    for struct, c_name in C_NAMES.items():
        lines.append(f'  printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
        for field, _ in struct._fields_:
            lines.append(f'  printf("{c_name} {field} %zu %zu\\n", offsetof({c_name}, {field}), '
                         f"sizeof((({c_name}*)0)->{field}));")
    lines += ["  return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, f"-I{REPO / 'include'}", str(source), "-o", str(exe)], check=True)
    c_layout = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    py_layout = []
    for struct, c_name in C_NAMES.items():
        py_layout.append(f"{c_name} sizeof {ctypes.sizeof(struct)}")
        for field, ctype in struct._fields_:
            py_layout.append(f"{c_name} {field} {getattr(struct, field).offset} "
                             f"{ctypes.sizeof(ctype)}")
    assert c_layout.split("\n")[:-1] == py_layout


def test_enums_match_the_header():
    header = (REPO / "include" / "flamia" / "flamia.h").read_text()
    for enum_cls, prefix in ((_capi.Status, "FLAMIA_"), (_capi.ScaleMode, "FLAMIA_SCALE_"),
                             (_capi.Precision, "FLAMIA_PRECISION_"),
                             (_capi.KeySmoothing, "FLAMIA_SMOOTH_")):
        for member in enum_cls:
            match = re.search(rf"\b{prefix}{member.name}\s*=\s*(\d+)", header)
            assert match, f"{prefix}{member.name} not in flamia.h"
            assert int(match.group(1)) == member.value, member


@pytest.fixture
def stub(stub_library, monkeypatch):
    monkeypatch.setenv(_capi.LIBRARY_ENV, str(stub_library))
    _capi._reset_for_tests()
    lib = _capi.library()
    lib.flamia_stub_describe_backward.argtypes = [ctypes.POINTER(_capi.BackwardArgs)]
    lib.flamia_stub_describe_backward.restype = ctypes.c_char_p
    yield lib
    _capi._reset_for_tests()


def _fields(description: str) -> dict:
    out = {}
    for name, value in re.findall(r"(\w+)=(\S+)", description):
        if value == "(nil)":
            value = "0"
        out[name] = value
    return out


def _addr(value: str) -> int:
    return int(value, 16) if value.startswith("0x") else int(value)


def _cpu_problem(heads_q=8, heads_kv=2, head_dim=128, total_q=150, total_k=150, strided=False):
    q = torch.randn(total_q, heads_q, head_dim, dtype=torch.bfloat16)
    if strided:  # q as a slice of a packed qkv projection: token stride 3 * heads * head_dim
        q = torch.randn(total_q, 3, heads_q, head_dim, dtype=torch.bfloat16)[:, 1]
    k = torch.randn(total_k, heads_kv, head_dim, dtype=torch.bfloat16)
    v = torch.randn(total_k, heads_kv, head_dim, dtype=torch.bfloat16)
    cu_q = torch.tensor([0, 17, 17, total_q], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 30, total_k], dtype=torch.int32)
    return q, k, v, cu_q, cu_k


STREAM = 0x5EA


@pytest.mark.parametrize("strided", [False, True])
def test_forward_marshalling(stub, strided):
    q, k, v, cu_q, cu_k = _cpu_problem(strided=strided, total_k=140)
    vector = torch.randn(2, 128)
    out, lse, stats = _ops._forward_outputs(q)
    problem = _ops.make_problem(q, k, cu_q, cu_k, 133, 110, 0.0883883, True, "block32",
                                "vector", vector)
    args = _ops.make_forward_args(q, k, v, out, lse, stats, problem, ctypes.c_void_p(STREAM))
    f = _fields(_ops.describe_forward(args))
    assert _addr(f["cu_q"]) == cu_q.data_ptr() and _addr(f["cu_k"]) == cu_k.data_ptr()
    assert _addr(f["host_q"]) == 0 and _addr(f["host_k"]) == 0
    assert (int(f["batch"]), int(f["total_q"]), int(f["total_k"])) == (3, 150, 140)
    assert (int(f["heads_q"]), int(f["heads_kv"]), int(f["head_dim"])) == (8, 2, 128)
    assert (int(f["max_q"]), int(f["max_k"])) == (133, 110)
    assert math.isclose(float(f["scale"]), 0.0883883, rel_tol=1e-6)
    assert int(f["causal"]) == 1
    assert int(f["scale_mode"]) == _capi.ScaleMode.BLOCK32
    assert int(f["smoothing"]) == _capi.KeySmoothing.VECTOR
    assert _addr(f["vector"]) == vector.data_ptr()
    for name, t in (("q", q), ("k", k), ("v", v), ("o", out)):
        ptr, token_stride, head_stride = f[name].split("/")
        assert (_addr(ptr), int(token_stride), int(head_stride)) == \
            (t.data_ptr(), t.stride(0), t.stride(1)), name
    assert _addr(f["lse"]) == lse.data_ptr() and _addr(f["stats"]) == stats.data_ptr()
    assert _addr(f["stream"]) == STREAM
    assert int(f["quantize"]) == _capi.ForwardQuantize.AUTO
    if strided:
        assert q.stride(0) == 3 * 8 * 128


@pytest.mark.parametrize("name", ["separate", "fused", "auto"])
def test_forward_quantize_from_environment(stub, monkeypatch, name):
    q, k, v, cu_q, cu_k = _cpu_problem()
    out, lse, stats = _ops._forward_outputs(q)
    problem = _ops.make_problem(q, k, cu_q, cu_k, 133, 133, 0.125, True, "exact", "none", None)
    monkeypatch.setenv(_ops.QUANTIZE_ENV, name)
    args = _ops.make_forward_args(q, k, v, out, lse, stats, problem, ctypes.c_void_p(STREAM))
    assert int(_fields(_ops.describe_forward(args))["quantize"]) == _capi.FORWARD_QUANTIZE[name]
    monkeypatch.setenv(_ops.QUANTIZE_ENV, "sometimes")
    with pytest.raises(ValueError, match="FLAMIA_FORWARD_QUANTIZE"):
        _ops.make_forward_args(q, k, v, out, lse, stats, problem, ctypes.c_void_p(STREAM))


def test_backward_marshalling(stub):
    q, k, v, cu_q, cu_k = _cpu_problem(heads_q=4, heads_kv=4, head_dim=64)
    out, lse, stats = _ops._forward_outputs(q)
    dout = torch.randn_like(out)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    problem = _ops.make_problem(q, k, cu_q, cu_k, 133, 133, 0.125, False, "exact", "first_key",
                                None)
    args = _ops.make_backward_args(dout, q, k, v, out, lse, stats, dq, dk, dv, problem,
                                   "fp8-bf16grad", True, ctypes.c_void_p(STREAM))
    f = _fields(stub.flamia_stub_describe_backward(ctypes.byref(args)).decode())
    assert int(f["precision"]) == _capi.Precision.FP8_BF16GRAD
    assert int(f["deterministic"]) == 1
    assert (int(f["batch"]), int(f["total_q"]), int(f["total_k"])) == (3, 150, 150)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", out), ("d_o", dout), ("dq", dq),
                    ("dk", dk), ("dv", dv)):
        ptr, token_stride, head_stride = f[name].split("/")
        assert (_addr(ptr), int(token_stride), int(head_stride)) == \
            (t.data_ptr(), t.stride(0), t.stride(1)), name
    assert _addr(f["lse"]) == lse.data_ptr() and _addr(f["stats"]) == stats.data_ptr()
    assert _addr(f["stream"]) == STREAM


def _backward_d_o(monkeypatch, dout):
    """The dO that _run_backward hands the library (CPU tensors: the stub then fails with
    FLAMIA_ERROR_NO_DEVICE)."""
    q, k, v, cu_q, cu_k = _cpu_problem(heads_q=4, heads_kv=4, head_dim=64)
    out, lse, stats = _ops._forward_outputs(q)
    seen = []
    make = _ops.make_backward_args
    monkeypatch.setattr(_ops, "make_backward_args",
                        lambda dout, *rest: seen.append(dout) or make(dout, *rest))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(_ops, "_stream", lambda device: ctypes.c_void_p(STREAM))
    with pytest.raises(flamia.FlamiaError, match="no sm_90 GPU"):
        _ops._run_backward(dout, q, k, v, out, lse, stats, cu_q, cu_k, k.shape, 133, 133,
                           0.125, False, "exact", "none", None, "fp8", False)
    return seen[0]


def test_backward_reads_every_gradient_layout(stub, monkeypatch):
    """dO's layout is autograd's, not the caller's: out.sum(1)'s gradient has head stride 0,
    out.sum(0)'s token stride 0, a slice of a wider gradient unaligned strides. The library
    reads positive strides of 16-byte multiples from 16-byte aligned data, so those arrive as
    contiguous copies; a readable strided dO arrives as it is."""
    grad = torch.randn(150, 64, dtype=torch.bfloat16)
    layouts = [grad[:, None].expand(150, 4, 64), grad[:4][None].expand(150, 4, 64),
               torch.randn(150, 4, 66, dtype=torch.bfloat16)[..., 1:65]]
    for dout in layouts:
        d_o = _backward_d_o(monkeypatch, dout)
        assert torch.equal(d_o, dout)
        assert d_o.stride(2) == 1 and d_o.data_ptr() % 16 == 0, d_o.stride()
        assert all(s > 0 and s % 8 == 0 for s in d_o.stride()[:2]), d_o.stride()
    strided = torch.randn(150, 3, 4, 64, dtype=torch.bfloat16)[:, 1]
    assert _backward_d_o(monkeypatch, strided) is strided


def test_status_becomes_flamia_error(stub):
    q, k, v, cu_q, cu_k = _cpu_problem()
    out, lse, stats = _ops._forward_outputs(q)
    problem = _ops.make_problem(q, k, cu_q, cu_k, 133, 133, 13.0, False, "exact", "none", None)
    args = _ops.make_forward_args(q, k, v, out, lse, stats, problem, ctypes.c_void_p(0))
    with pytest.raises(flamia.FlamiaError) as info:
        _capi.check("flamia_forward", stub.flamia_forward(ctypes.byref(args)))
    assert info.value.status == _capi.Status.ERROR_INVALID_ARGUMENT
    assert isinstance(info.value, RuntimeError)
    text = str(info.value)
    assert "flamia_forward" in text and "FLAMIA_ERROR_INVALID_ARGUMENT" in text
    assert "stub: bad scale" in text  # flamia_last_error_message()

    problem.head_dim = 96
    args.problem = problem
    size = ctypes.c_size_t(0)
    with pytest.raises(flamia.FlamiaError, match="FLAMIA_ERROR_UNSUPPORTED.*head_dim 96"):
        _capi.check("flamia_forward_workspace_size",
                    stub.flamia_forward_workspace_size(ctypes.byref(args), ctypes.byref(size)))


def test_ok_status_passes_and_workspace_size_is_returned(stub):
    q, k, v, cu_q, cu_k = _cpu_problem()
    out, lse, stats = _ops._forward_outputs(q)
    problem = _ops.make_problem(q, k, cu_q, cu_k, 133, 133, 0.1, False, "exact", "none", None)
    args = _ops.make_forward_args(q, k, v, out, lse, stats, problem, ctypes.c_void_p(0))
    size = ctypes.c_size_t(0)
    _capi.check("flamia_forward_workspace_size",
                stub.flamia_forward_workspace_size(ctypes.byref(args), ctypes.byref(size)))
    assert size.value == 4096 + 150  # the stub's formula: the value crossed the boundary


def test_status_names(stub):
    for status in _capi.Status:
        assert _capi.status_name(status) == f"FLAMIA_{status.name}"


def test_library_env_is_used(stub, stub_library):
    assert flamia.library_path() == stub_library
    assert flamia.load_library() == stub_library


def test_missing_library_error_names_the_paths(monkeypatch, tmp_path):
    missing = tmp_path / "nowhere" / "libflamia.so"
    monkeypatch.setenv(_capi.LIBRARY_ENV, str(missing))
    _capi._reset_for_tests()
    try:
        with pytest.raises(flamia.LibraryNotFound) as info:
            flamia.load_library()
        assert str(missing) in str(info.value) and "install-python" in str(info.value)
        assert isinstance(info.value, OSError)
    finally:
        _capi._reset_for_tests()


def test_search_order_without_env(monkeypatch):
    monkeypatch.delenv(_capi.LIBRARY_ENV, raising=False)
    paths = flamia.candidate_paths()
    assert paths[0] == REPO / "python" / "flamia" / "_lib" / "libflamia.so"
    assert paths[1] == REPO / "build" / "libflamia.so"


def test_a_library_without_the_api_is_rejected(monkeypatch, tmp_path):
    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler to build a library without the flamia API")
    source = tmp_path / "empty.c"
    source.write_text("int not_flamia(void) { return 0; }\n")
    lib = tmp_path / "libempty.so"
    subprocess.run([cc, "-shared", "-fPIC", str(source), "-o", str(lib)], check=True)
    monkeypatch.setenv(_capi.LIBRARY_ENV, str(lib))
    _capi._reset_for_tests()
    try:
        with pytest.raises(flamia.LibraryNotFound, match="flamia_forward"):
            flamia.load_library()
    finally:
        _capi._reset_for_tests()


def _real_library():
    """The library under test: FLAMIA_LIBRARY where the caller named one (e.g. an installed
    package's), else this checkout's build."""
    named = os.environ.get(_capi.LIBRARY_ENV)
    for path in ([pathlib.Path(named)] if named else []) + [
            REPO / "python" / "flamia" / "_lib" / "libflamia.so", REPO / "build" / "libflamia.so"]:
        if path.is_file():
            return path
    return None


@pytest.fixture
def real_library(monkeypatch):
    """The built libflamia.so, loaded (which declares, and so checks, every entry point)."""
    path = _real_library()
    if path is None:
        pytest.skip("libflamia.so is not built (cmake --build build) in this checkout, and "
                    "FLAMIA_LIBRARY names none")
    monkeypatch.setenv(_capi.LIBRARY_ENV, str(path))
    _capi._reset_for_tests()
    try:
        yield _capi.library()
    finally:
        _capi._reset_for_tests()


def test_real_library_exports_the_api(real_library):
    for status in _capi.Status:
        name = real_library.flamia_status_name(int(status))
        assert name and name.decode(), status
    assert isinstance(_capi.last_error_message(), str)


@pytest.mark.parametrize("total_q, total_k, heads_q, heads_kv, head_dim", [
    (1, 1, 1, 1, 64), (131, 131, 8, 2, 128), (17, 2049, 4, 4, 64), (4096, 113, 16, 1, 128),
    (0, 40, 2, 2, 128), (33, 0, 4, 2, 64)])
def test_saved_operands_size_matches_the_library(real_library, total_q, total_k, heads_q,
                                                 heads_kv, head_dim):
    """The fake tensors' size of the saved-operands buffer is the library's."""
    q = torch.empty(total_q, heads_q, head_dim, dtype=torch.bfloat16, device="meta")
    k = torch.empty(total_k, heads_kv, head_dim, dtype=torch.bfloat16, device="meta")
    cu = torch.zeros(2, dtype=torch.int32)
    problem = _ops.make_problem(q, k, cu, cu, max(total_q, 1), max(total_k, 1), 0.1, False,
                                "exact", "none", None)
    size = ctypes.c_size_t(0)
    _capi.check("flamia_saved_operands_size",
                real_library.flamia_saved_operands_size(ctypes.byref(problem),
                                                        ctypes.byref(size)))
    assert size.value == _ops.saved_operands_bytes(total_q, total_k, heads_q, heads_kv,
                                                   head_dim)


@pytest.mark.nogpu
def test_explain_names_the_training_path(real_library, monkeypatch):
    """explain() on meta tensors (no kernel runs; the stream is never used): a wanted gradient
    at precision fp8 selects the forward that keeps its operands, and nothing else does."""
    monkeypatch.setattr(_ops, "_stream", lambda device: ctypes.c_void_p(0))
    q = torch.empty(131, 8, 128, dtype=torch.bfloat16, device="meta")
    k = torch.empty(131, 2, 128, dtype=torch.bfloat16, device="meta")
    cu = torch.tensor([0, 17, 131], dtype=torch.int32, device="meta")
    keeping = "separate quantize pass keeping the backward's operands"
    assert keeping not in flamia.explain(q, k, k, cu, cu, 114, 114, causal=True)
    q.requires_grad_()
    assert keeping in flamia.explain(q, k, k, cu, cu, 114, 114, causal=True)
    assert keeping not in flamia.explain(q, k, k, cu, cu, 114, 114, precision="fp8-bf16grad")
    with torch.no_grad():
        assert keeping not in flamia.explain(q, k, k, cu, cu, 114, 114)
    monkeypatch.setenv(_ops.KEEP_OPERANDS_ENV, "0")
    assert keeping not in flamia.explain(q, k, k, cu, cu, 114, 114)


def _expect_no_device(call, name):
    with pytest.raises(flamia.FlamiaError) as info:
        _capi.check(name, call)
    assert info.value.status == _capi.Status.ERROR_NO_DEVICE, str(info.value)


def test_real_library_accepts_our_arguments_up_to_the_device(real_library):
    """With the real library and no GPU: every host-side check of the library (sizes, strides,
    alignment, workspace size, the saved-operands buffer) passes on what the bindings build, and
    the call stops only at the missing device. A marshalling error would show as
    INVALID_ARGUMENT instead."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the library would run its kernels on host pointers")
    lib = real_library
    q, k, v, cu_q, cu_k = _cpu_problem(strided=True)
    out, lse, stats = _ops._forward_outputs(q)
    problem = _ops.make_problem(q, k, cu_q, cu_q, 133, 133, 0.088, True, "block32", "first_key",
                                None)
    args = _ops.make_forward_args(q, k, v, out, lse, stats, problem, ctypes.c_void_p(0))
    nbytes = _ops.workspace_bytes(args)
    assert nbytes > 0
    workspace, pointer = _ops._workspace(nbytes, torch.device("cpu"))
    args.workspace, args.workspace_bytes = pointer, nbytes
    description = _ops.describe_forward(args)
    assert "hdim 128" in description and "block32" in description, description
    _expect_no_device(lib.flamia_forward(ctypes.byref(args)), "flamia_forward")

    dout = torch.randn_like(out)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    bargs = _ops.make_backward_args(dout, q, k, v, out, lse, stats, dq, dk, dv, problem,
                                    "fp8-bf16grad", True, ctypes.c_void_p(0))
    size = ctypes.c_size_t(0)
    _capi.check("flamia_backward_workspace_size",
                lib.flamia_backward_workspace_size(ctypes.byref(bargs), ctypes.byref(size)))
    bworkspace, bpointer = _ops._workspace(size.value, torch.device("cpu"))
    bargs.workspace, bargs.workspace_bytes = bpointer, size.value
    _expect_no_device(lib.flamia_backward(ctypes.byref(bargs)), "flamia_backward")

    # The training pair: the forward keeping its operands, the backward reading them (no q, k,
    # v); each with its own workspace size (the copies leave it).
    # (host memory here: a 256-byte-aligned view, as torch's CUDA allocations are)
    nsaved = _ops.saved_operands_bytes(q.shape[0], k.shape[0], q.shape[1], k.shape[1],
                                       q.shape[2])
    backing, aligned = _ops._workspace(nsaved, torch.device("cpu"))
    start = aligned - backing.data_ptr()
    saved = backing[start:start + nsaved]
    with pytest.raises(ValueError, match="not 256-byte aligned"):
        _ops._saved_pointer(backing[start + 16:])
    sargs = _ops.make_forward_args(q, k, v, out, lse, stats, problem, ctypes.c_void_p(0), saved)
    snbytes = _ops.workspace_bytes(sargs)
    assert snbytes < nbytes
    sworkspace, spointer = _ops._workspace(snbytes, torch.device("cpu"))
    sargs.workspace, sargs.workspace_bytes = spointer, snbytes
    _expect_no_device(lib.flamia_forward(ctypes.byref(sargs)), "flamia_forward")
    sbargs = _ops.make_backward_args(dout, None, None, None, out, lse, stats, dq, dk, dv,
                                     problem, "fp8", True, ctypes.c_void_p(0), saved)
    _capi.check("flamia_backward_workspace_size",
                lib.flamia_backward_workspace_size(ctypes.byref(sbargs), ctypes.byref(size)))
    sbworkspace, sbpointer = _ops._workspace(size.value, torch.device("cpu"))
    sbargs.workspace, sbargs.workspace_bytes = sbpointer, size.value
    _expect_no_device(lib.flamia_backward(ctypes.byref(sbargs)), "flamia_backward")

    # And a real refusal carries the library's message: head_dim 256 is not implemented.
    problem.head_dim = 256
    args.problem = problem
    with pytest.raises(flamia.FlamiaError, match="head_dim 256"):
        _ops.workspace_bytes(args)
    del workspace, bworkspace, sworkspace, sbworkspace


def _keys_as_quantized_amax(k, v, cu_k, key_smoothing, vector):
    keys = k.float()
    if key_smoothing == "vector":
        keys = keys - vector[None]
    elif key_smoothing == "first_key":
        starts = cu_k[:-1].long()
        lengths = (cu_k[1:] - cu_k[:-1]).long()
        keys = keys - keys[torch.repeat_interleave(starts, lengths)]
    return torch.stack([keys.abs().amax(dim=(0, 2)), v.float().abs().amax(dim=(0, 2))])


@pytest.mark.parametrize("key_smoothing", ["none", "first_key", "vector"])
@pytest.mark.parametrize("max_seqlen_q", [0, 1])
def test_forward_without_queries_gives_kv_amax_without_the_library(stub, monkeypatch,
                                                                  key_smoothing, max_seqlen_q):
    """kv_amax (a StaticScaleHistory's recording) of a forward with keys but no queries (cross
    attention with total_q = 0): the library refuses it (UNSUPPORTED: it runs no quantize pass
    without queries; INVALID_ARGUMENT for max_seqlen_q = 0, which the bindings accept), so the
    bindings must not call it and give the keys' and values' amax themselves."""
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(_ops, "_stream", lambda device: ctypes.c_void_p(STREAM))
    q = torch.randn(0, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(40, 2, 64, dtype=torch.bfloat16) * 3
    v = torch.randn(40, 2, 64, dtype=torch.bfloat16)
    cu_q = torch.tensor([0, 0, 0], dtype=torch.int32)
    cu_k = torch.tensor([0, 17, 40], dtype=torch.int32)
    vector = torch.randn(2, 64) if key_smoothing == "vector" else None
    exponents = torch.zeros(2, 2, dtype=torch.int8)
    out, lse, stats, amax = _ops._run_forward(
        q, k, v, cu_q, cu_k, max_seqlen_q, 23, 0.125, False, "static", key_smoothing, vector,
        "fp8", static_exponents=exponents, kv_amax=True)
    assert out.shape == (0, 4, 64) and lse.shape == (4, 0) and stats.shape == (4, 0, 2)
    assert amax.shape == (2, 2) and amax.dtype == torch.float32
    expected = _keys_as_quantized_amax(k, v, cu_k, key_smoothing, vector)
    torch.testing.assert_close(amax, expected, rtol=0, atol=0)
