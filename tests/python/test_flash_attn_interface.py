"""flamia.flash_attn_interface: FlashAttention-2's signatures, positional order included, mapped
onto flamia.attn_varlen_func / attn_func (CPU only: shapes are carried by meta tensors; the
loader points at nothing, so no call may reach the library)."""

from __future__ import annotations

import inspect

import pytest
import torch

from flamia import _capi, _interface
from flamia import flash_attn_interface as fa

BF16 = torch.bfloat16
TOTAL, HEADS_Q, HEADS_KV, HEAD_DIM = 150, 8, 2, 128

# FlashAttention-2's parameter lists (flash_attn/flash_attn_interface.py, v2.6-2.8), in order.
FA2_COMMON = ["dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes",
              "deterministic", "return_attn_probs"]
FA2_SIGNATURES = {
    "flash_attn_varlen_func": ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                               "max_seqlen_k"] + FA2_COMMON + ["block_table"],
    "flash_attn_varlen_qkvpacked_func": ["qkv", "cu_seqlens", "max_seqlen"] + FA2_COMMON,
    "flash_attn_varlen_kvpacked_func": ["q", "kv", "cu_seqlens_q", "cu_seqlens_k",
                                        "max_seqlen_q", "max_seqlen_k"] + FA2_COMMON,
    "flash_attn_func": ["q", "k", "v"] + FA2_COMMON,
    "flash_attn_qkvpacked_func": ["qkv"] + FA2_COMMON,
    "flash_attn_kvpacked_func": ["q", "kv"] + FA2_COMMON,
}
FLAMIA_OPTIONS = ["scale_mode", "precision", "key_smoothing", "qk_rotation"]


@pytest.fixture(autouse=True)
def no_library(monkeypatch):
    monkeypatch.setenv(_capi.LIBRARY_ENV, "/nonexistent/libflamia.so")
    _capi._reset_for_tests()
    yield
    assert _capi._library is None, "a meta-tensor call reached the library"
    _capi._reset_for_tests()


def _t(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.mark.parametrize("name", sorted(FA2_SIGNATURES))
def test_signatures_are_flash_attention_2s(name):
    params = inspect.signature(getattr(fa, name)).parameters
    positional = [p for p, v in params.items() if v.kind is v.POSITIONAL_OR_KEYWORD]
    keyword_only = [p for p, v in params.items() if v.kind is v.KEYWORD_ONLY]
    assert positional == FA2_SIGNATURES[name]
    assert keyword_only == FLAMIA_OPTIONS
    for p in FA2_COMMON:  # FlashAttention-2's defaults
        assert params[p].default == {"dropout_p": 0.0, "softmax_scale": None, "causal": False,
                                     "window_size": (-1, -1), "softcap": 0.0,
                                     "alibi_slopes": None, "deterministic": False,
                                     "return_attn_probs": False}[p]


def test_positional_call_maps_onto_attn_varlen_func(monkeypatch):
    seen = {}

    def spy(*args, **kwargs):
        seen["args"], seen["kwargs"] = args, kwargs
        return "out"

    monkeypatch.setattr(_interface, "attn_varlen_func", spy)
    q, k, v, cu = _t(4, 2, 64), _t(4, 1, 64), _t(4, 1, 64), _t(2, dtype=torch.int32)
    assert fa.flash_attn_varlen_func(q, k, v, cu, cu, 4, 4, 0.0, 0.25, True, (-1, 0), 0.0, None,
                                     True, False, None, scale_mode="block32") == "out"
    assert seen["args"] == (q, k, v, cu, cu, 4, 4)
    assert seen["kwargs"] == dict(dropout_p=0.0, softmax_scale=0.25, causal=True,
                                  window_size=(-1, 0), softcap=0.0, alibi_slopes=None,
                                  deterministic=True, return_attn_probs=False, block_table=None,
                                  scale_mode="block32", precision="fp8", key_smoothing="none",
                                  qk_rotation="none")


def test_varlen_functions_give_flash_attention_shapes():
    q = _t(TOTAL, HEADS_Q, HEAD_DIM)
    k, v = _t(TOTAL, HEADS_KV, HEAD_DIM), _t(TOTAL, HEADS_KV, HEAD_DIM)
    cu = _t(4, dtype=torch.int32)
    out = fa.flash_attn_varlen_func(q, k, v, cu, cu, 133, 133, 0.0, None, True)
    assert out.shape == (TOTAL, HEADS_Q, HEAD_DIM) and out.dtype == BF16
    out = fa.flash_attn_varlen_kvpacked_func(q, _t(TOTAL, 2, HEADS_KV, HEAD_DIM), cu, cu, 133,
                                             133, causal=True)
    assert out.shape == (TOTAL, HEADS_Q, HEAD_DIM)
    out = fa.flash_attn_varlen_qkvpacked_func(_t(TOTAL, 3, HEADS_Q, HEAD_DIM), cu, 133)
    assert out.shape == (TOTAL, HEADS_Q, HEAD_DIM)


def test_batched_functions_give_flash_attention_shapes():
    batch, seqlen = 3, 40
    q = _t(batch, seqlen, HEADS_Q, 64)
    kv = _t(batch, seqlen, 2, HEADS_KV, 64)
    assert fa.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], causal=True).shape == q.shape
    assert fa.flash_attn_kvpacked_func(q, kv, 0.0, 0.125, True).shape == q.shape
    qkv = _t(batch, seqlen, 3, HEADS_Q, 64)
    assert fa.flash_attn_qkvpacked_func(qkv).shape == q.shape


def test_unsupported_arguments_are_refused_by_name():
    q, k, v, cu = _t(4, 2, 64), _t(4, 1, 64), _t(4, 1, 64), _t(2, dtype=torch.int32)
    with pytest.raises(ValueError, match="dropout_p"):
        fa.flash_attn_varlen_func(q, k, v, cu, cu, 4, 4, 0.1)  # FlashAttention's dropout slot
    with pytest.raises(ValueError, match="sliding window is causal"):
        fa.flash_attn_varlen_func(q, k, v, cu, cu, 4, 4, 0.0, None, False, (128, 128))
    with pytest.raises(ValueError, match="return_attn_probs"):
        fa.flash_attn_varlen_func(q, k, v, cu, cu, 4, 4, return_attn_probs=True)
    with pytest.raises(ValueError, match=r"qkv must have shape \(total, 3, heads, head_dim\)"):
        fa.flash_attn_varlen_qkvpacked_func(_t(4, 2, 2, 64), cu, 4)
    with pytest.raises(ValueError, match=r"kv must have shape \(batch, seqlen, 2"):
        fa.flash_attn_kvpacked_func(_t(1, 4, 2, 64), _t(1, 4, 3, 1, 64))
    with pytest.raises(TypeError, match="qkv must be a torch.Tensor"):
        fa.flash_attn_qkvpacked_func([1, 2, 3])
