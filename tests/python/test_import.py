"""Importing flamia, op registration and the shape of the public signatures (CPU only)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest
import torch

import flamia
from conftest import REPO

FLASH_POSITIONAL = ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                    "max_seqlen_k"]


def test_import_needs_no_library():
    # A fresh interpreter whose library path points nowhere: import and op registration must
    # still work, and nothing must have been loaded. flamia.flash_attn_interface is reachable
    # from `import flamia` alone, as flash_attn.flash_attn_interface is.
    code = ("import torch, flamia; "
            "assert torch.ops.flamia.fwd.default is not None; "
            "assert callable(flamia.flash_attn_interface.flash_attn_varlen_func); "
            "assert torch.ops.flamia.bwd.default is not None; "
            "assert flamia.library_path() is None; print('ok')")
    env = dict(os.environ, FLAMIA_LIBRARY="/nonexistent/libflamia.so",
               PYTHONPATH=str(REPO / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_ops_registered_with_schema():
    fwd = str(torch.ops.flamia.fwd.default._schema)
    bwd = str(torch.ops.flamia.bwd.default._schema)
    assert fwd.startswith("flamia::fwd(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, "
                          "Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k"), fwd
    assert fwd.endswith("bool kv_amax=False) -> (Tensor, Tensor, Tensor, Tensor)"), fwd
    assert "Tensor? key_smoothing_vector" in fwd
    assert bwd.startswith("flamia::bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, "
                          "Tensor lse, Tensor softmax_stats"), bwd
    assert bwd.endswith("-> (Tensor, Tensor, Tensor)"), bwd


def test_public_names():
    for name in flamia.__all__:
        assert hasattr(flamia, name), name
    assert callable(flamia.attn_varlen_func) and callable(flamia.attn_func)
    assert callable(flamia.explain)
    assert issubclass(flamia.FlamiaError, RuntimeError)


def _kinds(fn):
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_varlen_everything_after_max_seqlen_k_is_keyword_only():
    params = _kinds(flamia.attn_varlen_func)
    positional = [n for n, kind in params if kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert positional == FLASH_POSITIONAL
    rest = [(n, kind) for n, kind in params if n not in FLASH_POSITIONAL]
    assert rest and all(kind == inspect.Parameter.KEYWORD_ONLY for _, kind in rest)
    names = {n for n, _ in rest}
    for expected in ("softmax_scale", "causal", "scale_mode", "precision", "deterministic",
                     "return_lse", "dropout_p", "window_size", "softcap", "alibi_slopes",
                     "key_smoothing"):
        assert expected in names, expected


def test_batched_everything_after_v_is_keyword_only():
    params = _kinds(flamia.attn_func)
    assert [n for n, _ in params[:3]] == ["q", "k", "v"]
    assert all(kind == inspect.Parameter.KEYWORD_ONLY for _, kind in params[3:])


def test_defaults_are_neutral():
    defaults = {n: p.default for n, p in
                inspect.signature(flamia.attn_varlen_func).parameters.items()}
    assert defaults["softmax_scale"] is None
    assert defaults["causal"] is False
    assert defaults["dropout_p"] == 0.0
    assert tuple(defaults["window_size"]) == (-1, -1)
    assert defaults["softcap"] == 0.0
    assert defaults["alibi_slopes"] is None
    assert defaults["scale_mode"] == "exact"
    assert defaults["precision"] == "fp8"
    assert defaults["deterministic"] is False
    assert defaults["return_lse"] is False
    assert defaults["key_smoothing"] == "none"


def _meta_problem():
    q = torch.empty(40, 4, 64, dtype=torch.bfloat16, device="meta")
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    return q, cu


def test_flash_attention_positional_dropout_is_an_error():
    # FlashAttention's order is (..., max_seqlen_k, dropout_p, softmax_scale, causal): a caller
    # passing those positionally must get an error, never a misread softmax_scale.
    q, cu = _meta_problem()
    with pytest.raises(TypeError, match="positional"):
        flamia.attn_varlen_func(q, q, q, cu, cu, 20, 20, 0.0)
    with pytest.raises(TypeError, match="positional"):
        flamia.attn_varlen_func(q, q, q, cu, cu, 20, 20, 0.0, 0.125, True)
    qb = torch.empty(2, 20, 4, 64, dtype=torch.bfloat16, device="meta")
    with pytest.raises(TypeError, match="positional"):
        flamia.attn_func(qb, qb, qb, 0.0)
