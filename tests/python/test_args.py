"""Argument errors: each wrong argument raises TypeError or ValueError naming it, before the
library is touched (CPU only: shapes are carried by meta tensors)."""

from __future__ import annotations

import math

import pytest
import torch

import flamia
from flamia import _capi, _checks

TOTAL, HEADS_Q, HEADS_KV, HEAD_DIM = 150, 8, 2, 128
BF16 = torch.bfloat16


def _t(*shape, dtype=BF16, device="meta"):
    return torch.empty(*shape, dtype=dtype, device=device)


def base_args():
    """A valid call: three documents (17, 0 and 133 tokens), GQA 4:1."""
    q = _t(TOTAL, HEADS_Q, HEAD_DIM)
    k = _t(TOTAL, HEADS_KV, HEAD_DIM)
    v = _t(TOTAL, HEADS_KV, HEAD_DIM)
    cu = _t(4, dtype=torch.int32)
    return dict(q=q, k=k, v=v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=133,
                max_seqlen_k=133)


@pytest.fixture(autouse=True)
def no_library(monkeypatch):
    """Points the loader at nothing: a check that let a bad call through to the library would
    show up as LibraryNotFound instead of the expected error."""
    monkeypatch.setenv(_capi.LIBRARY_ENV, "/nonexistent/libflamia.so")
    _capi._reset_for_tests()
    yield
    assert _capi._library is None, "an argument check reached the library"
    _capi._reset_for_tests()


def call(overrides=None, **kwargs):
    args = base_args()
    args.update(overrides or {})
    positional = [args.pop(n) for n in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k",
                                        "max_seqlen_q", "max_seqlen_k")]
    return flamia.attn_varlen_func(*positional, **kwargs)


def test_valid_call_on_meta_gives_shapes():
    out, lse = call(causal=True, return_lse=True)
    assert out.shape == (TOTAL, HEADS_Q, HEAD_DIM) and out.dtype == BF16
    assert lse.shape == (HEADS_Q, TOTAL) and lse.dtype == torch.float32


def test_neutral_flash_attention_values_accepted():
    out = call(dropout_p=0.0, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
               return_attn_probs=False, block_table=None, softmax_scale=0.1, deterministic=True,
               precision="fp8-bf16grad", scale_mode="block32", key_smoothing="first_key")
    assert out.shape == (TOTAL, HEADS_Q, HEAD_DIM)
    call(dropout_p=0, window_size=[-1, -1], softcap=0)


def _window(window_size, causal=False):
    return _checks.check_flash_attention_neutral(
        dropout_p=0.0, window_size=window_size, softcap=0.0, alibi_slopes=None,
        return_attn_probs=False, block_table=None, causal=causal)


def test_window_sizes_as_flash_attention_reads_them():
    """(causal, sliding_window): (-1, 0) is causal; (left, 0), or (left, -1) with causal=True, is
    a causal window of left + 1 keys; any negative left is unlimited."""
    assert _window((-1, 0)) == (True, 0)
    assert _window((-1, -1)) == (False, 0)
    assert _window((-5, -1), causal=True) == (True, 0)
    assert _window((0, 0)) == (True, 1)
    assert _window((127, 0)) == (True, 128)
    assert _window((127, -1), causal=True) == (True, 128)
    assert _window([3, 0]) == (True, 4)


def test_window_beyond_int32_is_unlimited_not_wrapped():
    # A window of 2^31 - 1 keys covers any document; the C field is int32 and must not wrap
    # (2^32 + 5 would otherwise become a window of 6 keys).
    assert _window((2**32 + 5, 0)) == (True, _checks.INT32_MAX)
    assert _window((2**70, 0)) == (True, _checks.INT32_MAX)
    assert _window((_checks.INT32_MAX - 1, 0)) == (True, _checks.INT32_MAX)


def test_window_minus_one_zero_means_causal():
    # Seen through the public call: causal=True rejects unequal query and key lengths.
    short_q = {"q": _t(TOTAL - 1, HEADS_Q, HEAD_DIM)}
    call(short_q)  # fine without causal
    with pytest.raises(ValueError, match="causal"):
        call(short_q, window_size=(-1, 0))


def _smoothing_vector(shape=(HEADS_KV, HEAD_DIM), dtype=torch.float32):
    return _t(*shape, dtype=dtype)


def _noncontiguous_last_dim():
    return _t(TOTAL, HEAD_DIM, HEADS_Q).transpose(1, 2)


# (id, overrides of the positional args, keyword args, exception, text the message must contain)
CASES = [
    ("q_dtype_fp16", {"q": _t(TOTAL, HEADS_Q, HEAD_DIM, dtype=torch.float16)}, {},
     TypeError, "q has dtype"),
    ("k_dtype_fp32", {"k": _t(TOTAL, HEADS_KV, HEAD_DIM, dtype=torch.float32)}, {},
     TypeError, "k has dtype"),
    ("v_dtype_fp8", {"v": _t(TOTAL, HEADS_KV, HEAD_DIM, dtype=torch.float8_e4m3fn)}, {},
     TypeError, "v has dtype"),
    ("q_not_tensor", {"q": [[1.0]]}, {}, TypeError, "q must be a torch.Tensor"),
    ("q_4d", {"q": _t(1, TOTAL, HEADS_Q, HEAD_DIM)}, {}, ValueError, "q must have shape"),
    ("head_dim_96", {"q": _t(TOTAL, HEADS_Q, 96), "k": _t(TOTAL, HEADS_KV, 96),
                     "v": _t(TOTAL, HEADS_KV, 96)}, {}, ValueError, "head_dim 96"),
    ("head_dim_256", {"q": _t(TOTAL, HEADS_Q, 256), "k": _t(TOTAL, HEADS_KV, 256),
                      "v": _t(TOTAL, HEADS_KV, 256)}, {}, ValueError, "head_dim 256"),
    ("q_cpu", {"q": _t(TOTAL, HEADS_Q, HEAD_DIM, device="cpu")}, {}, ValueError,
     "q is on device 'cpu'"),
    ("v_cpu", {"v": _t(TOTAL, HEADS_KV, HEAD_DIM, device="cpu")}, {}, ValueError,
     "v is on device 'cpu'"),
    ("q_last_dim_strided", {"q": _noncontiguous_last_dim()}, {}, ValueError,
     "q must be contiguous in its last"),
    ("k_v_shapes", {"v": _t(TOTAL - 1, HEADS_KV, HEAD_DIM)}, {}, ValueError,
     "k and v must have the same shape"),
    ("q_k_head_dims", {"q": _t(TOTAL, HEADS_Q, 64)}, {}, ValueError, "q has head_dim 64"),
    ("gqa_ratio", {"q": _t(TOTAL, 6, HEAD_DIM), "k": _t(TOTAL, 4, HEAD_DIM),
                   "v": _t(TOTAL, 4, HEAD_DIM)}, {}, ValueError, "multiple"),
    ("cu_q_int64", {"cu_seqlens_q": _t(4, dtype=torch.int64)}, {}, TypeError,
     "cu_seqlens_q has dtype"),
    ("cu_k_float", {"cu_seqlens_k": _t(4, dtype=torch.float32)}, {}, TypeError,
     "cu_seqlens_k has dtype"),
    ("cu_q_list", {"cu_seqlens_q": [0, 17, 17, 150]}, {}, TypeError, "cu_seqlens_q must be"),
    ("cu_q_2d", {"cu_seqlens_q": _t(2, 2, dtype=torch.int32)}, {}, ValueError,
     "cu_seqlens_q must be 1-D"),
    ("cu_q_one_entry", {"cu_seqlens_q": _t(1, dtype=torch.int32),
                        "cu_seqlens_k": _t(1, dtype=torch.int32)}, {}, ValueError,
     "cu_seqlens_q must be 1-D with batch + 1 >= 2"),
    ("cu_lengths_differ", {"cu_seqlens_k": _t(5, dtype=torch.int32)}, {}, ValueError,
     "cu_seqlens_q has 4 entries but cu_seqlens_k has 5"),
    ("cu_k_cpu", {"cu_seqlens_k": _t(4, dtype=torch.int32, device="cpu")}, {}, ValueError,
     "cu_seqlens_k is on device 'cpu'"),
    ("cu_q_strided", {"cu_seqlens_q": _t(8, dtype=torch.int32)[::2]}, {}, ValueError,
     "cu_seqlens_q must be contiguous"),
    ("max_q_tensor", {"max_seqlen_q": _t((), dtype=torch.int32)}, {}, TypeError,
     "max_seqlen_q must be a Python int"),
    ("max_k_float", {"max_seqlen_k": 133.0}, {}, TypeError, "max_seqlen_k must be an int"),
    ("max_q_negative", {"max_seqlen_q": -1}, {}, ValueError, "max_seqlen_q=-1"),
    ("max_k_zero", {"max_seqlen_k": 0}, {}, ValueError, "max_seqlen_k=0"),
    ("causal_str", {}, {"causal": "yes"}, TypeError, "causal must be a bool"),
    ("causal_unequal_totals", {"q": _t(TOTAL - 1, HEADS_Q, HEAD_DIM)}, {"causal": True},
     ValueError, "causal=True needs equal"),
    ("scale_str", {}, {"softmax_scale": "0.1"}, TypeError, "softmax_scale must be"),
    ("scale_nan", {}, {"softmax_scale": math.nan}, ValueError, "softmax_scale=nan"),
    ("scale_inf", {}, {"softmax_scale": math.inf}, ValueError, "softmax_scale=inf"),
    ("scale_zero", {}, {"softmax_scale": 0.0}, ValueError, "softmax_scale=0.0"),
    ("scale_mode_mx", {}, {"scale_mode": "mx"}, ValueError, "scale_mode='mx'"),
    ("scale_mode_int", {}, {"scale_mode": 1}, TypeError, "scale_mode must be a string"),
    ("static_without_exponents", {}, {"scale_mode": "static"}, TypeError,
     "needs static_exponents"),
    ("static_exponents_bf16", {}, {"scale_mode": "static", "static_exponents": _t(2, HEADS_KV)},
     ValueError, "static_exponents must be an int8 tensor of shape"),
    ("static_exponents_1d", {},
     {"scale_mode": "static", "static_exponents": _t(HEADS_KV, dtype=torch.int8)}, ValueError,
     f"int8 tensor of shape (2, {HEADS_KV}), got torch.int8 ({HEADS_KV},)"),
    ("static_exponents_cpu", {},
     {"scale_mode": "static", "static_exponents": _t(2, HEADS_KV, dtype=torch.int8, device="cpu")},
     ValueError, "static_exponents is on cpu"),
    ("static_exponents_without_static", {},
     {"static_exponents": _t(2, HEADS_KV, dtype=torch.int8)}, ValueError,
     "used only with scale_mode='static'"),
    ("precision_fp16", {}, {"precision": "fp16"}, ValueError, "precision='fp16'"),
    ("deterministic_int", {}, {"deterministic": 1}, TypeError, "deterministic must be a bool"),
    ("return_lse_str", {}, {"return_lse": "no"}, TypeError, "return_lse must be a bool"),
    ("dropout", {}, {"dropout_p": 0.1}, ValueError, "dropout_p=0.1 is not supported"),
    ("dropout_str", {}, {"dropout_p": "0"}, TypeError, "dropout_p must be a float"),
    ("window_left_not_causal", {}, {"window_size": (128, -1)}, ValueError,
     "window_size=(128, -1) without causal"),
    ("window_right", {}, {"window_size": (-1, 64)}, ValueError, "window_size=(-1, 64)"),
    ("window_both_sides", {}, {"window_size": (16, 16), "causal": True}, ValueError,
     "window_size=(16, 16)"),
    ("window_type", {}, {"window_size": 5}, TypeError, "window_size must be a pair"),
    ("softcap", {}, {"softcap": 30.0}, ValueError, "softcap=30.0 is not supported"),
    ("alibi", {}, {"alibi_slopes": torch.zeros(HEADS_Q)}, ValueError,
     "alibi_slopes is not supported"),
    ("attn_probs", {}, {"return_attn_probs": True}, ValueError, "return_attn_probs"),
    ("block_table", {}, {"block_table": torch.zeros(1, 1, dtype=torch.int32)}, ValueError,
     "block_table is not supported"),
    ("smoothing_name", {}, {"key_smoothing": "mean"}, ValueError, "key_smoothing='mean'"),
    ("smoothing_vector_word", {}, {"key_smoothing": "vector"}, ValueError,
     "pass the vector itself"),
    ("smoothing_type", {}, {"key_smoothing": 5}, TypeError, "key_smoothing must be"),
    ("smoothing_dtype", {}, {"key_smoothing": _smoothing_vector(dtype=BF16)}, TypeError,
     "key_smoothing (a vector) has dtype"),
    ("smoothing_shape", {}, {"key_smoothing": _smoothing_vector((HEADS_Q, HEAD_DIM))},
     ValueError, "key_smoothing (a vector) must have shape"),
    ("smoothing_cpu", {}, {"key_smoothing": torch.zeros(HEADS_KV, HEAD_DIM)}, ValueError,
     "key_smoothing is on device 'cpu'"),
]


@pytest.mark.parametrize("overrides, kwargs, exc, text", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_argument_error(overrides, kwargs, exc, text):
    with pytest.raises(exc) as info:
        call(overrides, **kwargs)
    assert text in str(info.value), str(info.value)


def test_argument_errors_name_each_argument_once():
    # Every listed case is distinct (guards against copy-paste cases testing the same thing).
    assert len({c[0] for c in CASES}) == len(CASES)
    assert len({c[4] for c in CASES}) == len(CASES)


def test_vector_smoothing_accepted():
    out = call(key_smoothing=_smoothing_vector())
    assert out.shape == (TOTAL, HEADS_Q, HEAD_DIM)


def test_batched_errors():
    q = _t(2, 75, HEADS_Q, HEAD_DIM)
    kv = _t(2, 75, HEADS_KV, HEAD_DIM)
    with pytest.raises(ValueError, match="q must have shape \\(batch, seqlen"):
        flamia.attn_func(_t(TOTAL, HEADS_Q, HEAD_DIM), kv, kv)
    with pytest.raises(ValueError, match="same batch size"):
        flamia.attn_func(q, _t(3, 75, HEADS_KV, HEAD_DIM), _t(3, 75, HEADS_KV, HEAD_DIM))
    with pytest.raises(TypeError, match="v must be a torch.Tensor"):
        flamia.attn_func(q, kv, None)
    with pytest.raises(ValueError, match="dropout_p=0.5"):
        flamia.attn_func(q, kv, kv, dropout_p=0.5)
    with pytest.raises(TypeError, match="q has dtype"):
        flamia.attn_func(q.float(), kv, kv)
    with pytest.raises(ValueError, match="k and v must have the same shape"):
        flamia.attn_func(q, kv, _t(2, 76, HEADS_KV, HEAD_DIM))


def test_batched_empty_sequences():
    # seqlen 0 on either side: no tokens (seqlen_q) or rows without keys (seqlen_k).
    kv = _t(2, 75, HEADS_KV, HEAD_DIM)
    out, lse = flamia.attn_func(_t(2, 0, HEADS_Q, HEAD_DIM), kv, kv, return_lse=True)
    assert out.shape == (2, 0, HEADS_Q, HEAD_DIM) and lse.shape == (2, HEADS_Q, 0)
    empty = _t(2, 0, HEADS_KV, HEAD_DIM)
    out = flamia.attn_func(_t(2, 75, HEADS_Q, HEAD_DIM), empty, empty)
    assert out.shape == (2, 75, HEADS_Q, HEAD_DIM)


def test_explain_checks_arguments_first():
    args = base_args()
    with pytest.raises(ValueError, match="scale_mode='mx'"):
        flamia.explain(*args.values(), scale_mode="mx")


# Values that sit on or across what the front checks, per argument (meta tensors).
FUZZ_VALUES = {
    "q": lambda: _t(TOTAL, HEADS_Q, HEAD_DIM, dtype=torch.float16),
    "k": lambda: _t(TOTAL, HEADS_KV + 1, HEAD_DIM),
    "v": lambda: _t(TOTAL - 1, HEADS_KV, HEAD_DIM),
    "cu_seqlens_q": lambda: _t(3, dtype=torch.int32),
    "cu_seqlens_k": lambda: _t(4, dtype=torch.int64),
    "max_seqlen_q": lambda: 0,
    "max_seqlen_k": lambda: 2**40,
}
FUZZ_KWARGS = {
    "causal": (True, False, 1, None),
    "softmax_scale": (None, 0.1, -1.0, math.nan, "x", 1e30),
    "window_size": ((-1, -1), (-1, 0), (0, 0), (127, 0), (5, 5), (3,), None, (-2, -3)),
    "scale_mode": ("exact", "block32", "static", "mx", None),
    "static_exponents": (None, _t(2, HEADS_KV, dtype=torch.int8), _t(2, HEADS_KV)),
    "precision": ("fp8", "fp8-bf16grad", "bf16"),
    "deterministic": (True, False, 0),
    "key_smoothing": (None, "none", "first_key", "vector", 3),
    "dropout_p": (0.0, 0.5, -0.1),
    "softcap": (0.0, 1.0),
    "return_lse": (True, False),
}


def test_random_calls_return_outputs_or_name_the_bad_argument():
    """Random combinations of FlashAttention-style options and broken arguments: every call
    either returns outputs of the documented shapes or raises TypeError / ValueError with a
    message naming an argument, never another exception, and never reaches the library (the
    fixture). The seed is printed on failure."""
    import random

    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    outcomes = {"returned": 0, "refused": 0}
    names = list(FUZZ_VALUES) + list(FUZZ_KWARGS)
    for case in range(2000):
        overrides = {n: FUZZ_VALUES[n]() for n in FUZZ_VALUES if rng.random() < 0.08}
        kwargs = {n: rng.choice(v) for n, v in FUZZ_KWARGS.items() if rng.random() < 0.5}
        context = f"seed {seed}, case {case}: overrides {sorted(overrides)}, kwargs {kwargs}"
        try:
            result = call(overrides, **kwargs)
        except (TypeError, ValueError) as e:
            assert any(n in str(e) for n in names), f"{context}: {e}"
            outcomes["refused"] += 1
            continue
        out, lse = result if kwargs.get("return_lse") else (result, None)
        assert out.shape == (TOTAL, HEADS_Q, HEAD_DIM) and out.dtype == BF16, context
        if lse is not None:
            assert lse.shape == (HEADS_Q, TOTAL) and lse.dtype == torch.float32, context
        outcomes["returned"] += 1
    # Both outcomes must occur, or the fuzz tests only one side. About 3% of the calls return
    # (300 seeds: mean 64.5 of 2000, s.d. 7.9, min 45); 20 is 5.6 s.d. below the mean, so the
    # bound cannot fail by chance (it was 50, which 5% of the seeds missed).
    assert outcomes["returned"] >= 20 and outcomes["refused"] >= 20, (seed, outcomes)
