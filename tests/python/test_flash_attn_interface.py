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
                                  deterministic=True, return_lse=False, block_table=None,
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
        fa.flash_attn_varlen_func(q, k, v, cu, cu, 4, 4, 0.0, None, False, (2, 2))
    with pytest.raises(TypeError, match="return_attn_probs must be a bool"):
        fa.flash_attn_varlen_func(q, k, v, cu, cu, 4, 4, return_attn_probs="yes")
    with pytest.raises(ValueError, match="sliding window is causal"):  # non-causal, inside seqlen
        fa.flash_attn_func(_t(1, 8, 2, 64), _t(1, 8, 1, 64), _t(1, 8, 1, 64),
                           window_size=(2, 2))
    with pytest.raises(ValueError, match=r"qkv must have shape \(total, 3, heads, head_dim\)"):
        fa.flash_attn_varlen_qkvpacked_func(_t(4, 2, 2, 64), cu, 4)
    with pytest.raises(ValueError, match=r"kv must have shape \(batch, seqlen, 2"):
        fa.flash_attn_kvpacked_func(_t(1, 4, 2, 64), _t(1, 4, 3, 1, 64))
    with pytest.raises(TypeError, match="qkv must be a torch.Tensor"):
        fa.flash_attn_qkvpacked_func([1, 2, 3])


def test_return_attn_probs_gives_out_lse_and_no_probabilities():
    """FlashAttention-2 with return_attn_probs=True and no dropout returns (out, softmax_lse,
    S_dmask) with no probabilities in S_dmask; softmax_lse (heads, total_q) from the varlen
    functions, (batch, heads, seqlen_q) from the others (was: ValueError pointing at a
    return_lse these functions do not have)."""
    q = _t(TOTAL, HEADS_Q, HEAD_DIM)
    kv = _t(TOTAL, 2, HEADS_KV, HEAD_DIM)
    cu = _t(4, dtype=torch.int32)
    for result in (fa.flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu, cu, 133, 133, 0.0, None,
                                             True, (-1, -1), 0.0, None, False, True),
                   fa.flash_attn_varlen_kvpacked_func(q, kv, cu, cu, 133, 133,
                                                      return_attn_probs=True),
                   fa.flash_attn_varlen_qkvpacked_func(_t(TOTAL, 3, HEADS_Q, HEAD_DIM), cu, 133,
                                                       return_attn_probs=True)):
        out, lse, s_dmask = result
        assert out.shape == q.shape and s_dmask is None
        assert lse.shape == (HEADS_Q, TOTAL) and lse.dtype == torch.float32
    batch, seqlen = 3, 40
    q = _t(batch, seqlen, HEADS_Q, 64)
    kv = _t(batch, seqlen, 2, HEADS_KV, 64)
    for result in (fa.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], return_attn_probs=True),
                   fa.flash_attn_kvpacked_func(q, kv, 0.0, None, True, (-1, -1), 0.0, None,
                                               False, True),
                   fa.flash_attn_qkvpacked_func(_t(batch, seqlen, 3, HEADS_Q, 64),
                                                return_attn_probs=True)):
        out, lse, s_dmask = result
        assert out.shape == q.shape and s_dmask is None
        assert lse.shape == (batch, HEADS_Q, seqlen) and lse.dtype == torch.float32
        assert not lse.requires_grad
    q.requires_grad_()
    out, lse, _ = fa.flash_attn_func(q, q, q, return_attn_probs=True)
    out.float().sum().backward()
    assert q.grad.shape == q.shape and not lse.requires_grad


def _spy_masks(monkeypatch):
    seen = []
    for name in ("attn_varlen_func", "attn_func"):
        def spy(*args, **kwargs):
            window = kwargs["window_size"]
            seen.append((kwargs["causal"], tuple(window) if window is not None else None))
            return "out"
        monkeypatch.setattr(_interface, name, spy)
    return seen


def test_causal_and_window_size_read_as_flash_attention_2_reads_them(monkeypatch):
    """flash_api.cpp: causal=True sets the window's right side to 0 (Hugging Face passes
    window_size=(w, w) with causal=True for sliding-window models), a side at least seqlen_k
    long is unlimited, and one query row is not causal. flamia refused all three."""
    seen = _spy_masks(monkeypatch)
    q, k = _t(2, 16, 4, 64), _t(2, 16, 2, 64)
    fa.flash_attn_func(q, k, k, 0.0, None, True, (4, 4))  # HF's sliding window
    fa.flash_attn_func(q, k, k, window_size=(16, 99))  # wider than seqlen_k: no window
    fa.flash_attn_func(q, k, k, causal=True, window_size=(20, -1))
    fa.flash_attn_func(_t(2, 1, 4, 64), k, k, causal=True)  # one query: sees every key
    fa.flash_attn_func(_t(2, 1, 4, 64), k, k, causal=True, alibi_slopes=_t(4))  # (refused later)
    cu = _t(3, dtype=torch.int32)
    x = _t(32, 4, 64)
    fa.flash_attn_varlen_func(x, x, x, cu, cu, 16, 16, causal=True, window_size=(8, 8))
    fa.flash_attn_varlen_func(x, x, x, cu, cu, 16, 16, window_size=(16, 16))
    fa.flash_attn_varlen_qkvpacked_func(_t(32, 3, 4, 64), cu, 16, 0.0, None, True, (3, 3))
    fa.flash_attn_varlen_func(_t(2, 4, 64), x, x, cu, cu, 1, 16, causal=True)
    assert seen == [(True, (4, 0)), (False, (-1, -1)), (True, (-1, 0)), (False, (-1, -1)),
                    (True, (-1, 0)), (True, (8, 0)), (False, (-1, -1)), (True, (3, 0)),
                    (False, (-1, -1))]
    # Wrong types go on unchanged, for flamia's checks to name them.
    fa.flash_attn_func(q, k, k, causal=1, window_size=(4, 4))
    fa.flash_attn_func(q, k, k, window_size=None)
    assert seen[-2:] == [(1, (4, 4)), (False, None)]


def test_flash_attention_2_window_on_meta_tensors():
    """The same through flamia's own checks: HF's causal (w, w) window is accepted."""
    q, k = _t(2, 16, 4, 64), _t(2, 16, 2, 64)
    assert fa.flash_attn_func(q, k, k, 0.0, None, True, (4, 4)).shape == q.shape
    kv = _t(2, 16, 2, 2, 64)
    assert fa.flash_attn_kvpacked_func(q, kv, causal=True, window_size=(4, 4)).shape == q.shape
    assert fa.flash_attn_func(_t(2, 1, 4, 64), k, k, causal=True).shape == (2, 1, 4, 64)


def test_packed_inputs_receive_their_gradients():
    """qkv and kv are read through views: the backward writes into the packed tensor's grad
    (meta tensors: shapes only)."""
    qkv = _t(10, 3, 4, 64).requires_grad_()
    cu = _t(3, dtype=torch.int32)
    fa.flash_attn_varlen_qkvpacked_func(qkv, cu, 6, causal=True).float().sum().backward()
    assert qkv.grad is not None and qkv.grad.shape == qkv.shape
    q, kv = _t(2, 5, 4, 64).requires_grad_(), _t(2, 7, 2, 2, 64).requires_grad_()
    fa.flash_attn_kvpacked_func(q, kv).float().sum().backward()
    assert kv.grad.shape == kv.shape and q.grad.shape == q.shape
