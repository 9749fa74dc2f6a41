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
