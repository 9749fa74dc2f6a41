"""flamia.static_exponents: scale_mode "static"'s exponents from K and V or their amax (CPU)."""
import pytest
import torch

import flamia


def _heads(*amax):
    """A (1, heads, 4) tensor whose head h holds amax[h] (and smaller values)."""
    t = torch.zeros(1, len(amax), 4)
    for h, a in enumerate(amax):
        t[0, h] = torch.tensor([a, -a / 3, 0.0, a / 7])
    return t


def test_smallest_exponent_that_fits_448():
    k = _heads(4.0, 500.0, 448.0, 2.0**-20)
    v = _heads(-7.0, 1.0, 449.0, 0.0)
    e = flamia.static_exponents(k, v)
    assert e.dtype == torch.int8 and e.shape == (2, 4)
    amax = torch.stack([k.abs().amax(dim=(0, 2)), v.abs().amax(dim=(0, 2))])
    scaled = amax * torch.exp2(-e.float())
    assert (scaled <= 448).all(), scaled
    nonzero = amax > 0
    assert (scaled[nonzero] * 2 > 448).all(), scaled  # one exponent less would not fit
    assert e[0].tolist() == [-6, 1, 0, -28]


def test_margin_amax_input_and_range():
    e = flamia.static_exponents(torch.tensor([4.0, 3e38]), torch.tensor([0.0, 1.0]), margin=10)
    assert e.tolist() == [[-6 + 10, 127], [-126, -8 + 10]]  # clamped to [-126, 127]
    assert flamia.static_exponents(torch.ones(2), torch.ones(2)).tolist() == [[-8, -8], [-8, -8]]


@pytest.mark.parametrize("k, v, margin, error", [
    (torch.ones(2), torch.ones(3), 0, ValueError),
    (torch.ones(2, 2), torch.ones(2), 0, ValueError),
    ([1.0], torch.ones(1), 0, TypeError),
    (torch.ones(1), torch.ones(1), -1, ValueError),
    (torch.ones(1), torch.ones(1), True, ValueError),
])
def test_bad_arguments(k, v, margin, error):
    with pytest.raises(error):
        flamia.static_exponents(k, v, margin=margin)


def _kv(a_k, a_v, heads=2):
    """(3, heads, 4) K and V whose every head's amax is a_k and a_v."""
    k, v = torch.zeros(3, heads, 4), torch.zeros(3, heads, 4)
    k[1, :, 2], v[2, :, 0] = a_k, -a_v
    return k, v


def test_history_takes_the_recorded_calls_amax():
    scales = flamia.StaticScaleHistory(margin=0, history=2, count_saturated=True)
    assert scales.exponents(*_kv(4.0, 448.0)).tolist() == [[-6, -6], [0, 0]]  # its own: first
    assert int(scales.saturated) == 0 and not scales.saturated_heads.any()
    assert scales.exponents(*_kv(900.0, 2.0)).tolist() == [[-6, -6], [0, 0]]  # call 1's amax
    assert int(scales.saturated) == 2  # K's 900 > 448 * 2^-6 in both heads; V's 2 fits
    assert scales.saturated_heads.tolist() == [[True, True], [False, False]]
    assert scales.exponents(*_kv(1.0, 1.0)).tolist() == [[2, 2], [0, 0]]  # max of calls 1, 2
    assert scales.exponents(*_kv(1.0, 1.0)).tolist() == [[2, 2], [-7, -7]]  # calls 2, 3
    assert scales.exponents(*_kv(1.0, 1.0)).tolist() == [[-8, -8], [-8, -8]]  # calls 3, 4


def test_history_through_the_forward_records_the_forwards_amax():
    """The path attn_varlen_func(..., static_exponents=history) takes: the same exponents as
    exponents() (the first call's own amax, then the recorded ones), but what it records is the
    amax the forward measured (here handed in), not one computed from k and v."""
    scales = flamia.StaticScaleHistory(margin=0, history=2, count_saturated=True)
    e = scales._forward_exponents(*_kv(4.0, 448.0))
    assert e.tolist() == [[-6, -6], [0, 0]] and int(scales.saturated) == 0
    scales._record_forward(torch.tensor([[900.0, 1.0], [2.0, 2.0]]), e)
    assert scales.saturated_heads.tolist() == [[True, False], [False, False]]
    # a recomputed forward (activation checkpointing) gets the last call's exponents
    assert scales._forward_exponents(*_kv(1.0, 1.0), recomputing=True).tolist() == [[-6, -6],
                                                                                      [0, 0]]
    e = scales._forward_exponents(*_kv(1.0, 1.0))  # the recorded amax, not this call's
    assert e.tolist() == [[2, -8], [-7, -7]]
    scales._record_forward(torch.tensor([[float("nan"), 1.0], [2.0, 2.0]]), e)  # a failed call
    assert torch.isfinite(scales.recorded_amax()[-1]).all()
    assert scales._forward_exponents(*_kv(1.0, 1.0)).tolist() == [[2, -8], [-7, -7]]
    with pytest.raises(ValueError, match="KV heads"):
        scales._forward_exponents(*_kv(1.0, 1.0, heads=3))


def test_keys_as_quantized_subtract_the_smoothing():
    from flamia._static_scaling import keys_as_quantized

    k = torch.randn(7, 2, 4, dtype=torch.bfloat16)
    cu = torch.tensor([0, 3, 3, 7], dtype=torch.int32)  # documents of 3, 0 and 4 keys
    assert keys_as_quantized(k, cu, "none", None) is k
    first = keys_as_quantized(k, cu, "first_key", None)
    expected = k.float().clone()
    expected[:3] -= k[0].float()
    expected[3:] -= k[3].float()
    assert torch.equal(first, expected)
    vector = torch.randn(2, 4)
    assert torch.equal(keys_as_quantized(k, cu, "vector", vector), k.float() - vector)


def test_history_margin_and_unrecorded_calls():
    scales = flamia.StaticScaleHistory(margin=2, history=4)
    scales.exponents(*_kv(1.0, 1.0))
    scales.exponents(*_kv(2.0, 2.0))  # recorded: the history's bound is 2 from now on
    # a recomputed forward (record=False) gets the last recording call's exponents (those of
    # the forward it recomputes, from call 1's amax) and adds nothing to the history
    assert scales.exponents(*_kv(1000.0, 1000.0), record=False).tolist() == [[-6, -6], [-6, -6]]
    assert scales.saturated_heads.all() and scales.saturated is None  # not counted by default
    assert scales.exponents(*_kv(1.0, 1.0)).tolist() == [[-5, -5], [-5, -5]]  # calls 1, 2


@pytest.mark.parametrize("make, error", [
    (lambda: flamia.StaticScaleHistory(margin=-1), ValueError),
    (lambda: flamia.StaticScaleHistory(history=0), ValueError),
    (lambda: flamia.StaticScaleHistory(history=True), ValueError),
    (lambda: flamia.StaticScaleHistory().exponents(torch.ones(2), torch.ones(2)), ValueError),
    (lambda: flamia.StaticScaleHistory().exponents(*_kv(1.0, 1.0, heads=2)[:1], torch.ones(3, 3, 4)),
     ValueError),
])
def test_history_rejects_bad_arguments(make, error):
    with pytest.raises(error):
        make()


def test_history_rejects_another_head_count():
    scales = flamia.StaticScaleHistory()
    scales.exponents(*_kv(1.0, 1.0, heads=2))
    with pytest.raises(ValueError, match="KV heads"):
        scales.exponents(*_kv(1.0, 1.0, heads=3))


def test_amax_is_the_largest_magnitude_per_head():
    """key_value_amax (static_exponents' and StaticScaleHistory's) equals |t|.amax over tokens
    and head dim for every dtype, NaN and infinities included."""
    from flamia._interface import key_value_amax

    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        k = (torch.randn(300, 3, 16, generator=gen) * 5).to(dtype)
        v = (torch.randn(300, 3, 16, generator=gen) * 5).to(dtype)
        k[7, 1, 2], k[:, 2] = -900.0, 0.0
        v[0, 0, 0], v[1, 1, 1] = float("nan"), float("-inf")
        got = key_value_amax(k, v)
        want = torch.stack([k.abs().amax(dim=(0, 2)), v.abs().amax(dim=(0, 2))]).float()
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num())
    empty = key_value_amax(torch.zeros(0, 2, 8), torch.zeros(0, 2, 8))
    assert empty.tolist() == [[0.0, 0.0], [0.0, 0.0]]
