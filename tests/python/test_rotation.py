"""qk_rotation="hadamard" without a GPU: the rotation is exact where the note says it is, leaves
attention unchanged in exact arithmetic, lowers E4M3's error of Q·Kᵀ on channel-concentrated
inputs, carries gradients, and traces under torch.compile."""

from __future__ import annotations

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

import flamia
from attention_reference import e4m3, scale_exponent
from flamia import _rotation

BF16 = torch.bfloat16


def e4m3_per_token(x: torch.Tensor) -> torch.Tensor:
    """x's E4M3 values at each (token, head)'s scale (the contract's `exact` blocks), as x's
    dtype (the products are exact in float64)."""
    e = scale_exponent(x.abs().amax(-1, keepdim=True)).to(x.dtype)
    return e4m3(x * torch.exp2(-e)).to(x.dtype) * torch.exp2(e)


@pytest.mark.parametrize("dim", [64, 128, 256])
def test_rotation_pair_is_exactly_inverse_and_exact_in_bf16(dim):
    r_q, r_k = _rotation.rotation_matrices(dim, torch.float64, "cpu")
    assert torch.equal(r_q @ r_k.T, torch.eye(dim, dtype=torch.float64))
    for r in (r_q, r_k):
        assert torch.equal(r.to(BF16).double(), r)  # ±2^-n: exact in BF16
    q_factor, k_factor = _rotation.operand_scales(dim)
    assert q_factor * k_factor == 1.0 / dim
    assert math.log2(q_factor).is_integer() and math.log2(k_factor).is_integer()
    signs = _rotation.rotation_signs(dim)
    assert 0.3 < (signs < 0).double().mean() < 0.7  # randomised, not all +1


def test_signs_follow_the_fixed_pattern():
    """The signs are bit d % 64 of the documented constant, whatever builds them (the device-op
    form must keep every machine's and version's rotation identical)."""
    for dim in (1, 64, 128, 256):
        bits = [(_rotation._SIGN_PATTERN >> (d % 64)) & 1 for d in range(dim)]
        expected = torch.tensor([-1.0 if b else 1.0 for b in bits], dtype=torch.float64)
        assert torch.equal(_rotation.rotation_signs(dim), expected), dim


def test_traced_rotation_makes_no_host_tensor():
    """Building the matrices for a traced (meta or fake) input runs device ops only: a compiled
    graph then holds no CPU op and no copy to the device (which would also keep CUDA graphs from
    capturing it)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    devices = set()

    class RecordDevices(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    devices.add(t.device.type)
            return out

    with RecordDevices():
        r_q, r_k = _rotation.rotation_matrices(128, BF16, "meta", cacheable=False)
    assert devices == {"meta"}, devices
    assert r_q.device.type == "meta" and r_q.dtype == BF16


def test_rejects_bad_rotation_and_head_dim():
    with pytest.raises(ValueError, match="qk_rotation must be one of"):
        _rotation.check_rotation("walsh")
    with pytest.raises(ValueError, match="power-of-two head_dim"):
        _rotation.sylvester_hadamard(96)


def test_scores_unchanged_and_fp8_error_smaller_on_concentrated_channels():
    gen = torch.Generator().manual_seed(7)
    tokens, dim = 256, 128
    q = torch.randn(tokens, 1, dim, generator=gen, dtype=torch.float64)
    k = torch.randn(tokens, 1, dim, generator=gen, dtype=torch.float64)
    q[..., :4] *= 20  # a few shared outlier channels carry most of q·k
    k[..., :4] *= 20
    scores = torch.einsum("qhd,khd->hqk", q, k)
    qr, kr = _rotation.rotate_qk(q, k, "hadamard")
    torch.testing.assert_close(torch.einsum("qhd,khd->hqk", qr, kr), scores, rtol=1e-12,
                               atol=1e-9)

    def fp8_error(a, b):
        approx = torch.einsum("qhd,khd->hqk", e4m3_per_token(a), e4m3_per_token(b))
        return ((approx - scores).norm() / scores.norm()).item()

    plain, rotated = fp8_error(q, k), fp8_error(qr, kr)
    assert rotated < 0.6 * plain, (plain, rotated)
    # On isotropic inputs the rotation neither helps nor hurts much.
    qi = torch.randn(tokens, 1, dim, generator=gen, dtype=torch.float64)
    ki = torch.randn(tokens, 1, dim, generator=gen, dtype=torch.float64)
    scores = torch.einsum("qhd,khd->hqk", qi, ki)
    qir, kir = _rotation.rotate_qk(qi, ki, "hadamard")
    ratio = fp8_error(qir, kir) / fp8_error(qi, ki)
    assert 0.8 < ratio < 1.25, ratio


def test_gradients_flow_through_the_rotation():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(5, 2, 64, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(5, 1, 64, generator=gen, dtype=torch.float64, requires_grad=True)

    def scores(q, k):
        qr, kr = _rotation.rotate_qk(q, k, "hadamard")
        return torch.einsum("qhd,kd->hqk", qr, kr[:, 0]).sin()

    assert torch.autograd.gradcheck(scores, (q, k))


def test_key_vector_rotates_with_the_keys_and_stays_fp32_under_autocast():
    vector = torch.randn(2, 128)
    with torch.autocast("cpu", dtype=BF16):
        rotated = _rotation.rotate_key_vector(vector, "hadamard")
    assert rotated.dtype == torch.float32 and rotated.is_contiguous()
    k = torch.randn(3, 2, 128)
    _, kr = _rotation.rotate_qk(k, k, "hadamard")
    _, r_k = _rotation.rotation_matrices(128, torch.float32, "cpu")
    torch.testing.assert_close((k - vector) @ r_k, kr - rotated)


def test_rotated_q_and_k_stay_bf16_under_float16_autocast():
    # The arguments are checked before the rotation: an FP16 product would reach the kernels,
    # which read every q and k as BF16.
    q, k = torch.randn(5, 2, 64, dtype=BF16), torch.randn(5, 1, 64, dtype=BF16)
    with torch.autocast("cpu", dtype=torch.float16):
        qr, kr = _rotation.rotate_qk(q, k, "hadamard")
    assert qr.dtype == BF16 and kr.dtype == BF16
    assert torch.equal(kr, _rotation.rotate_qk(q, k, "hadamard")[1])


def test_fake_shapes_and_compile_with_rotation():
    # A real pair cached for the device the fake tensors name must not leak into fake mode.
    _rotation.rotation_matrices(128, BF16, "cpu")
    with FakeTensorMode():
        qc = torch.empty(40, 8, 128, dtype=BF16)
        out_q, _ = _rotation.rotate_qk(qc, qc, "hadamard")
        assert is_fake(out_q)
    with FakeTensorMode():
        q = torch.empty(40, 8, 128, dtype=BF16, device="cuda")
        kv = torch.empty(40, 2, 128, dtype=BF16, device="cuda")
        cu = torch.zeros(3, dtype=torch.int32, device="cuda")
        out = flamia.attn_varlen_func(q, kv, kv, cu, cu, 20, 20, causal=True,
                                      qk_rotation="hadamard")
        assert out.shape == q.shape and out.dtype == BF16
        with pytest.raises(ValueError, match="qk_rotation must be one of"):
            flamia.attn_varlen_func(q, kv, kv, cu, cu, 20, 20, qk_rotation="yes")

    torch._dynamo.reset()
    q = torch.randn(40, 8, 128, dtype=BF16, device="meta", requires_grad=True)
    kv = torch.randn(40, 2, 128, dtype=BF16, device="meta", requires_grad=True)
    cu = torch.zeros(3, dtype=torch.int32, device="meta")

    def layer(q, kv, cu):
        return flamia.attn_varlen_func(q, kv, kv, cu, cu, 20, 20, causal=True,
                                       qk_rotation="hadamard").float().sum()

    explanation = torch._dynamo.explain(layer)(q, kv, cu)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    loss = torch.compile(layer, fullgraph=True, backend="aot_eager")(q, kv, cu)
    loss.backward()
    assert q.grad.shape == q.shape and kv.grad.shape == kv.shape
