"""GPU tests of the Python package against PyTorch references (need an sm_90 GPU and
libflamia.so; skipped with the reason otherwise).

Bounds: on N(0, 1) inputs, relative L2 error against float64 attention at most 0.08 for O and
0.1 for dQ, dK, dV. Tighter, from docs/numerics.md §7: the forward against the contract
emulation of attention_reference.contract_forward within 5e-3 (O) and 1e-3 (LSE), and no
further from float64 than 1.1x the emulation's own error + 1e-3; the BF16-gradient backward no
less accurate than the FP8 one on dQ and dK (it uses strictly finer operands there)."""

from __future__ import annotations

import math
import os
import zlib

import pytest
import torch

import flamia
from attention_reference import (LSE_FLIP_BOUND, LSE_MEAN_BOUND, attention_f64,
                                 contract_forward, doc_bounds, poison_cuda_allocator, rel_l2)

BF16 = torch.bfloat16
DEVICE = "cuda"
O_BOUND, GRAD_BOUND = 0.08, 0.1
CONTRACT_O_BOUND = 5e-3
CONTRACT_RATIO, CONTRACT_SLACK = 1.1, 1e-3
LSE_F64_BOUND = 0.25  # absolute; FP8 S moves LSE by a few 1e-2 on N(0, 1) data
WINDOW_ROW_BOUND = 5e-3  # a windowed row vs its window alone: FP32 summation order and BF16
AWKWARD = [1, 17, 113, 0, 2049, 300]  # incl. an empty document and a 2k+1 one
RUN_SEED = int(os.environ.get("FLAMIA_TEST_SEED", "0"))  # conftest.py: fresh per run


def _fresh(seed):
    """A test's seed mixed with the run's: distinct seeds stay distinct, runs differ. Kept to 64
    bits: torch refuses larger seeds, and a seed the C++ tests printed (64 bits) may be given."""
    return ((RUN_SEED << 16) ^ seed) & 0xFFFF_FFFF_FFFF_FFFF


def assert_lse_matches_the_contract(lse, emulated_lse):
    finite = torch.isfinite(emulated_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    # (the non-finite ones too: -inf, not a NaN, where the contract has no key)
    assert torch.equal(lse[~finite], emulated_lse[~finite])
    diff = (lse[finite] - emulated_lse[finite]).abs()
    assert diff.mean() <= LSE_MEAN_BOUND, diff.mean()
    assert diff.max() <= LSE_FLIP_BOUND, diff.max()


def _skip_reason() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"flamia needs an sm_90 (Hopper) GPU; this one is sm_{major}{minor}"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_skip_reason() is not None,
                                                  reason=str(_skip_reason()))]


@pytest.fixture(autouse=True)
def _fresh_global_generators(request):
    """torch's default generators start from a fixed seed in every process: seed them per test
    from the run's seed, so inputs drawn without a generator are fresh too (and repeatable)."""
    torch.manual_seed(_fresh(zlib.crc32(request.node.nodeid.encode())))


def _cu(seqlens, device=None):
    cu = [0]
    for n in seqlens:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=device or DEVICE)


def _sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _poison_allocator(fill=math.nan, *, nbytes=1 << 28):
    """Leaves `fill` in every free block of the caching allocator and in one of at least `nbytes`
    (attention_reference.poison_cuda_allocator), so outputs the library forgot to write show up,
    as long as the call allocates no more than that: NaN where finite outputs are expected, 0
    where NaN outputs are (a forgotten NaN output would pass otherwise). A single NaN tensor of
    `nbytes` reached no output of 1 MiB or less (every LSE) and none that fit a smaller free
    block."""
    assert math.isnan(fill) or fill == 0.0, f"poison is NaN or 0, not {fill}"
    poison_cuda_allocator(fill, nbytes, DEVICE)


def make(seqlens_q, seqlens_k=None, heads_q=8, heads_kv=2, head_dim=128, seed=0,
         requires_grad=True):
    seqlens_k = seqlens_q if seqlens_k is None else seqlens_k
    gen = torch.Generator(device=DEVICE).manual_seed(_fresh(seed))
    total_q, total_k = sum(seqlens_q), sum(seqlens_k)

    def randn(*shape):
        t = torch.randn(*shape, generator=gen, device=DEVICE, dtype=torch.float32).to(BF16)
        return t.requires_grad_(requires_grad)

    q = randn(total_q, heads_q, head_dim)
    k = randn(total_k, heads_kv, head_dim)
    v = randn(total_k, heads_kv, head_dim)
    return dict(q=q, k=k, v=v, cu_seqlens_q=_cu(seqlens_q), cu_seqlens_k=_cu(seqlens_k),
                max_seqlen_q=max(seqlens_q), max_seqlen_k=max(seqlens_k))


def run(p, dout=None, poison=math.nan, **kwargs):
    """Forward (and backward when dout is given) through flamia; returns a dict of results.
    `poison`: what the outputs' memory holds before (_poison_allocator)."""
    for name in ("q", "k", "v"):
        p[name].grad = None
    _poison_allocator(poison)
    out, lse = flamia.attn_varlen_func(p["q"], p["k"], p["v"], p["cu_seqlens_q"],
                                       p["cu_seqlens_k"], p["max_seqlen_q"], p["max_seqlen_k"],
                                       return_lse=True, **kwargs)
    result = dict(out=out.detach(), lse=lse)
    if dout is not None:
        out.backward(dout)
        result.update(dq=p["q"].grad.clone(), dk=p["k"].grad.clone(), dv=p["v"].grad.clone())
    _sync()
    return result


def reference(p, dout, causal, softmax_scale=None, window=0):
    q, k, v = (p[n].detach().double().requires_grad_() for n in ("q", "k", "v"))
    scale = softmax_scale or 1.0 / math.sqrt(q.shape[2])
    out, lse = attention_f64(q, k, v, p["cu_seqlens_q"], p["cu_seqlens_k"], scale, causal,
                             window)
    result = dict(out=out.detach(), lse=lse.detach())
    if dout is not None:
        out.backward(dout.double())
        result.update(dq=q.grad, dk=k.grad, dv=v.grad)
    return result


def assert_finite(result):
    for name, t in result.items():
        if name == "lse":
            assert not torch.isnan(t).any(), "lse has NaN"
            assert not (t == math.inf).any(), "lse has +inf"
        else:
            assert torch.isfinite(t).all(), f"{name} has NaN or Inf"


def errors(result, ref):
    return {name: rel_l2(result[name], ref[name]) for name in ("out", "dq", "dk", "dv")
            if name in result}


# ---- accuracy -------------------------------------------------------------------------------


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("heads_q, heads_kv", [(8, 8), (8, 2), (4, 1)])
@pytest.mark.parametrize("scale_mode", ["exact", "block32"])
@pytest.mark.parametrize("precision", ["fp8", "fp8-bf16grad"])
def test_causal_varlen_against_float64(head_dim, heads_q, heads_kv, scale_mode, precision):
    p = make(AWKWARD, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim)
    dout = torch.randn_like(p["q"])
    result = run(p, dout, causal=True, scale_mode=scale_mode, precision=precision)
    ref = reference(p, dout, causal=True)
    assert_finite(result)
    err = errors(result, ref)
    assert err["out"] <= O_BOUND, err
    for name in ("dq", "dk", "dv"):
        assert err[name] <= GRAD_BOUND, err
    assert (result["lse"].double() - ref["lse"]).abs().max() <= LSE_F64_BOUND


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("keep_operands", ["1", "0"])
def test_static_scales_against_float64_and_the_kept_operands(head_dim, causal, keep_operands,
                                                             monkeypatch):
    """scale_mode "static": K and V with one exponent per KV head (here from the data's amax,
    as delayed scaling would give it), through both training paths (the forward keeping its
    operands or not): accurate against float64, the same bits either way."""
    monkeypatch.setenv("FLAMIA_KEEP_OPERANDS", keep_operands)
    p = make(AWKWARD, heads_q=8, heads_kv=2, head_dim=head_dim)
    exponents = flamia.static_exponents(p["k"], p["v"])
    dout = torch.randn_like(p["q"])
    # deterministic: dQ's atomic additions would differ in their last bits between any two runs
    result = run(p, dout, causal=causal, scale_mode="static", static_exponents=exponents,
                 deterministic=True)
    ref = reference(p, dout, causal=causal)
    assert_finite(result)
    err = errors(result, ref)
    assert err["out"] <= O_BOUND, err
    for name in ("dq", "dk", "dv"):
        assert err[name] <= GRAD_BOUND, err
    monkeypatch.setenv("FLAMIA_KEEP_OPERANDS", "1" if keep_operands == "0" else "0")
    again = run(p, dout, causal=causal, scale_mode="static", static_exponents=exponents,
                deterministic=True)
    for name in ("out", "lse", "dq", "dk", "dv"):
        assert torch.equal(again[name], result[name]), name


def _keys_as_quantized(k, cu_seqlens, smoothing):
    """k - m in FP32 (m: each document's first key, a vector, or 0), as the quantize pass."""
    k = k.detach().float()
    if isinstance(smoothing, torch.Tensor):
        return k - smoothing[None]
    if smoothing == "first_key":
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
        first = torch.repeat_interleave(cu_seqlens[:-1].long(), lengths)
        return k - k[first]
    return k


@pytest.mark.parametrize("scale_mode, smoothing, keep", [
    ("exact", "none", False), ("static", "first_key", True), ("block32", "vector", False),
    ("static", "none", True)])
def test_forward_amax_output_equals_torch(scale_mode, smoothing, keep):
    """flamia::fwd / fwd_saving with kv_amax: each KV head's max |k - m| and max |v| from the
    quantize pass, bit for bit the same FP32 maxima as torch's; GQA, awkward documents."""
    p = make(AWKWARD, heads_q=8, heads_kv=4, head_dim=64, requires_grad=False)
    vector = torch.randn(4, 64, device=DEVICE) if smoothing == "vector" else None
    exponents = flamia.static_exponents(p["k"], p["v"], margin=2) if scale_mode == "static" \
        else None
    args = (p["q"], p["k"], p["v"], p["cu_seqlens_q"], p["cu_seqlens_k"], p["max_seqlen_q"],
            p["max_seqlen_k"], 0.125, True, scale_mode, "vector" if vector is not None else
            smoothing, vector)
    _poison_allocator()
    if keep:
        amax = torch.ops.flamia.fwd_saving(*args, False, 0, exponents, True)[4]
    else:
        amax = torch.ops.flamia.fwd(*args, "fp8", False, 0, exponents, True)[3]
    keys = _keys_as_quantized(p["k"], p["cu_seqlens_k"], vector if vector is not None else
                              smoothing)
    expected = torch.stack([keys.abs().amax(dim=(0, 2)),
                            p["v"].detach().float().abs().amax(dim=(0, 2))])
    assert torch.equal(amax, expected), (amax, expected)


@pytest.mark.parametrize("with_gradient", [False, True])
def test_static_scale_history_through_the_forward(with_gradient):
    """attn_varlen_func(..., static_exponents=history): the exponents history.exponents would
    give (the first call's own amax, then the recorded ones), the same bits as passing them,
    and the forward's own amax recorded (no smoothing: torch's amax of k and v)."""
    scales = flamia.StaticScaleHistory(margin=1, history=4)
    steps = [make(AWKWARD, heads_q=8, heads_kv=2, head_dim=128, seed=s,
                  requires_grad=with_gradient) for s in range(3)]
    expected_exponents = flamia.static_exponents(steps[0]["k"], steps[0]["v"], margin=1)
    for i, p in enumerate(steps):
        dout = torch.randn_like(p["q"]) if with_gradient else None
        through = run(p, dout, causal=True, scale_mode="static", static_exponents=scales,
                      deterministic=True)
        given = run(p, dout, causal=True, scale_mode="static",
                    static_exponents=expected_exponents, deterministic=True)
        for name in through:
            assert torch.equal(through[name], given[name]), (i, name)
        recorded = scales.recorded_amax()[-1]
        assert torch.equal(recorded, flamia._interface.key_value_amax(p["k"], p["v"])), i
        assert scales.saturated_heads.shape == (2, 2)
        bound = torch.stack(scales.recorded_amax()).amax(dim=0)
        expected_exponents = flamia.static_exponents(bound[0], bound[1], margin=1)
    assert len(scales.recorded_amax()) == len(steps)


def test_static_scales_saturate_as_documented():
    """Values beyond 448 * 2^e saturate to 448 * 2^e (satfinite): an exponent too small for V
    clips O, and a larger one does not."""
    p = make([1] * 64 + [5] * 40, heads_q=2, heads_kv=2, head_dim=64, requires_grad=False)
    ref = reference(p, None, causal=True)
    fits = torch.full((2, 2), -3, dtype=torch.int8, device=DEVICE)  # |x| <= 56
    clipped = fits.clone()
    clipped[1] = -9  # V limited to 448 * 2^-9 = 0.875
    good = run(p, causal=True, scale_mode="static", static_exponents=fits)
    bad = run(p, causal=True, scale_mode="static", static_exponents=clipped)
    assert rel_l2(good["out"], ref["out"]) <= O_BOUND
    assert rel_l2(bad["out"], ref["out"]) > 2 * O_BOUND
    assert bad["out"].abs().max() <= 0.875


@pytest.mark.parametrize("seqlens_q, seqlens_k", [
    ([5, 17, 0, 64, 3], [9, 1, 33, 128, 0]),  # the last document has queries but no key
    ([3, 40, 1, 7, 60, 2], [10, 5, 64, 1, 0, 30]),  # packed short ones, one without keys
    ([113], [2049]),
])
def test_noncausal_cross_lengths(seqlens_q, seqlens_k):
    p = make(seqlens_q, seqlens_k, heads_q=4, heads_kv=2, head_dim=64)
    dout = torch.randn_like(p["q"])
    result = run(p, dout, causal=False)
    ref = reference(p, dout, causal=False)
    assert_finite(result)
    err = errors(result, ref)
    assert err["out"] <= O_BOUND and max(err["dq"], err["dk"], err["dv"]) <= GRAD_BOUND, err
    # Rows with no visible key: O = 0 exactly and LSE = -inf.
    for (qs, qe), (ks, ke) in zip(doc_bounds(p["cu_seqlens_q"]), doc_bounds(p["cu_seqlens_k"])):
        if ke == ks and qe > qs:
            assert (result["out"][qs:qe] == 0).all()
            assert (result["lse"][:, qs:qe] == -math.inf).all()
            assert (result["dq"][qs:qe] == 0).all()


@pytest.mark.parametrize("scale_mode", ["exact", "block32"])
@pytest.mark.parametrize("key_smoothing", ["none", "first_key"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_forward_matches_the_numerics_contract(scale_mode, key_smoothing, head_dim):
    p = make(AWKWARD, heads_q=4, heads_kv=2, head_dim=head_dim, requires_grad=False)
    scale = 1.0 / math.sqrt(head_dim)
    result = run(p, None, causal=True, scale_mode=scale_mode, key_smoothing=key_smoothing)
    emulated_out, emulated_lse = contract_forward(p["q"], p["k"], p["v"], p["cu_seqlens_q"],
                                                  p["cu_seqlens_k"], scale, True, scale_mode,
                                                  key_smoothing)
    ref = reference(p, None, causal=True)
    assert rel_l2(result["out"], emulated_out) <= CONTRACT_O_BOUND
    assert_lse_matches_the_contract(result["lse"], emulated_lse)
    own = rel_l2(emulated_out, ref["out"])
    assert rel_l2(result["out"], ref["out"]) <= CONTRACT_RATIO * own + CONTRACT_SLACK


def test_vector_key_smoothing_against_the_contract():
    p = make([300, 77], heads_q=4, heads_kv=2, head_dim=128, requires_grad=False)
    # Keys with a large shared component: the case key smoothing exists for.
    shared = 4.0 * torch.randn(2, 128, device=DEVICE)
    p["k"] = (p["k"].float() + shared).to(BF16)
    vector = shared.float().contiguous()
    result = run(p, None, causal=True, key_smoothing=vector)
    emulated_out, emulated_lse = contract_forward(p["q"], p["k"], p["v"], p["cu_seqlens_q"],
                                                  p["cu_seqlens_k"], 1 / math.sqrt(128), True,
                                                  "exact", vector)
    assert rel_l2(result["out"], emulated_out) <= CONTRACT_O_BOUND
    assert_lse_matches_the_contract(result["lse"], emulated_lse)


def test_bf16_gradients_are_at_least_as_accurate():
    p = make(AWKWARD, heads_q=8, heads_kv=2, head_dim=128)
    dout = torch.randn_like(p["q"])
    ref = reference(p, dout, causal=True)
    fp8 = errors(run(p, dout, causal=True, precision="fp8"), ref)
    bf16 = errors(run(p, dout, causal=True, precision="fp8-bf16grad"), ref)
    for name in ("dq", "dk"):
        assert bf16[name] <= fp8[name] + CONTRACT_SLACK, (fp8, bf16)


def test_softmax_scale_is_used():
    p = make([257, 64], heads_q=4, heads_kv=4, head_dim=64)
    dout = torch.randn_like(p["q"])
    result = run(p, dout, causal=True, softmax_scale=0.3)
    ref = reference(p, dout, causal=True, softmax_scale=0.3)
    err = errors(result, ref)
    # softmax_scale 0.3 at head dim 64 makes logits ~2.4x sharper than 1/sqrt(64): the FP8 error
    # of S grows with the logits (numerics note §6), so the bounds scale with them (measured on
    # the H200: O 0.066, dQ 0.102). A scale that was ignored would give errors of order 1.
    sharpness = 0.3 * math.sqrt(64)
    assert err["out"] <= O_BOUND * sharpness / 2 and max(err["dq"], err["dk"], err["dv"]) <= (
        GRAD_BOUND * sharpness / 2), err


# ---- causality: the property the exact scale mode promises ------------------------------------


def _spread_values(v, binades, seed):
    """Scales each token's values by 2^u, u uniform in [-binades, binades]: value exponents far
    apart inside a key tile, so the forward sums part of l on its FP32 fallback."""
    if binades == 0:
        return v
    gen = torch.Generator(device=v.device).manual_seed(_fresh(seed))
    u = torch.randint(-binades, binades + 1, (v.shape[0], 1, 1), generator=gen, device=v.device)
    return (v.float() * torch.exp2(u.float())).to(v.dtype)


@pytest.mark.parametrize("value_spread", [0, 12])
@pytest.mark.parametrize("key_smoothing", ["none", "first_key"])
@pytest.mark.parametrize("scale_mode", ["exact", "block32"])
def test_outputs_do_not_depend_on_later_tokens_or_other_documents(scale_mode, key_smoothing,
                                                                  value_spread):
    seqlens = [300, 190]
    cut = 150  # perturb document 0 from this position on, and all of document 1
    p = make(seqlens, heads_q=8, heads_kv=2, head_dim=128, requires_grad=False)
    p["v"] = _spread_values(p["v"], value_spread, seed=2)
    options = dict(scale_mode=scale_mode, key_smoothing=key_smoothing)
    before = run(p, None, causal=True, **options)
    for name in ("q", "k", "v"):
        t = p[name].clone()
        t[cut:] = torch.randn_like(t[cut:]) * 3
        if name == "v":
            t[cut:] = _spread_values(t[cut:], value_spread, seed=3)
        p[name] = t
    after = run(p, None, causal=True, **options)
    # exact: every earlier row is bitwise unchanged; block32: rows of earlier 32-token blocks.
    keep = cut if scale_mode == "exact" else cut // 32 * 32
    assert torch.equal(before["out"][:keep], after["out"][:keep])
    assert torch.equal(before["lse"][:, :keep], after["lse"][:, :keep])
    assert not torch.equal(before["out"][cut:], after["out"][cut:])  # the test can fail

    # The other direction, forward and backward: perturbing document 1 leaves document 0's O,
    # dQ, dK and dV bitwise unchanged (deterministic: no accumulation-order noise).
    p2 = make(seqlens, heads_q=8, heads_kv=2, head_dim=128, seed=1)
    dout = torch.randn_like(p2["q"])
    first = run(p2, dout, causal=False, deterministic=True, **options)
    for name in ("q", "k", "v"):
        t = p2[name].detach().clone()
        t[seqlens[0]:] = t[seqlens[0]:] * 5 + 1
        p2[name] = t.requires_grad_()
    dout2 = dout.clone()
    dout2[seqlens[0]:] = torch.randn_like(dout2[seqlens[0]:])
    second = run(p2, dout2, causal=False, deterministic=True, **options)
    for name in ("out", "dq", "dk", "dv"):
        assert torch.equal(first[name][:seqlens[0]], second[name][:seqlens[0]]), name
        assert not torch.equal(first[name][seqlens[0]:], second[name][seqlens[0]:]), name


@pytest.mark.parametrize("head_dim", [64, 128])
def test_qk_rotation_cuts_the_error_of_concentrated_channels(head_dim):
    """q and k that share four large channels (as trained models' do): the Hadamard rotation
    must lower O's and the gradients' error against float64, and keep exact mode causal."""
    p = make(AWKWARD, heads_q=8, heads_kv=2, head_dim=head_dim, seed=5)
    for name, channel_scale in (("q", 3.0), ("k", 12.0)):
        t = p[name].detach().clone() * 0.25
        t[..., :4] *= channel_scale / 0.25
        p[name] = t.requires_grad_()
    dout = torch.randn_like(p["q"])
    ref = reference(p, dout, causal=True)
    plain = run(p, dout, causal=True)
    rotated = run(p, dout, causal=True, qk_rotation="hadamard")
    assert_finite(rotated)
    err_plain, err_rotated = errors(plain, ref), errors(rotated, ref)
    for name in ("out", "dq", "dk"):
        assert err_rotated[name] < 0.8 * err_plain[name], (name, err_plain, err_rotated)
    assert err_rotated["out"] <= O_BOUND and err_rotated["dv"] <= GRAD_BOUND, err_rotated
    # LSE is the same function of q·k, and closer to the float64 one (logits reach ±20 here, so
    # neither meets the N(0, 1) bound LSE_F64_BOUND).
    lse_error = {name: (r["lse"].double() - ref["lse"]).abs().mean().item()
                 for name, r in (("plain", plain), ("rotated", rotated))}
    assert lse_error["rotated"] < 0.8 * lse_error["plain"], lse_error
    # exact mode stays causal: rows before `cut` bitwise unchanged when later tokens change.
    cut = 40
    q2, k2 = (p[n].detach().clone() for n in ("q", "k"))
    q2[cut:], k2[cut:] = q2[cut:] * 2 + 1, k2[cut:].flip(-1)
    p2 = dict(p, q=q2, k=k2)
    later = run(p2, None, causal=True, qk_rotation="hadamard")
    assert torch.equal(later["out"][:cut], rotated["out"][:cut])
    assert not torch.equal(later["out"][cut:], rotated["out"][cut:])


@pytest.mark.parametrize("scale_mode", ["exact", "block32"])
def test_packed_short_documents_stay_independent(scale_mode):
    """Documents of <= 64 tokens share forward work items (several per tile, each row masked to
    its own document): changing one leaves every other bitwise unchanged, and in exact mode a
    document's earlier rows do not see its later tokens."""
    seqlens = [7, 30, 1, 45, 20, 60, 33, 5, 64, 2]
    changed, cut = 5, 25  # document 5 changes from its position 25 on
    p = make(seqlens, heads_q=4, heads_kv=2, head_dim=128, requires_grad=False)
    before = run(p, None, causal=True, scale_mode=scale_mode)
    assert errors(before, reference(p, None, causal=True))["out"] <= O_BOUND
    start = sum(seqlens[:changed])
    end = start + seqlens[changed]
    for name in ("q", "k", "v"):
        t = p[name].clone()
        t[start + cut:end] = torch.randn_like(t[start + cut:end]) * 3
        p[name] = t
    after = run(p, None, causal=True, scale_mode=scale_mode)
    keep = cut if scale_mode == "exact" else cut // 32 * 32
    for name in ("out", "lse"):
        a, b = before[name], after[name]
        if name == "lse":
            a, b = a.transpose(0, 1), b.transpose(0, 1)  # (tokens, heads)
        assert torch.equal(a[:start + keep], b[:start + keep]), name
        assert torch.equal(a[end:], b[end:]), name
    assert not torch.equal(before["out"][start + cut:end], after["out"][start + cut:end])


def _row_bits(result):
    """Per output row (token, query head): O's bits and LSE's bits, for exact comparison."""
    return result["out"].view(torch.int16), result["lse"].transpose(0, 1).contiguous().view(
        torch.int32)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("scale_mode", ["exact", "block32"])
@pytest.mark.parametrize("tensor", ["q", "k", "v"])
def test_nan_in_one_document_is_never_a_finite_wrong_value(tensor, scale_mode, head_dim):
    """docs/numerics.md, "Non-finite inputs": a NaN in one document's q, k or v makes outputs of
    that document non-finite, and in the forward may reach documents whose key tiles hold some
    of its tokens (masked arithmetically: 0 x NaN). What must never happen is a finite wrong
    value: every output row is either the clean run's bit for bit or non-finite; documents whose
    tiles hold none of its tokens are unchanged; and the poisoned token's own row is
    non-finite (the NaN is not silently dropped)."""
    seqlens = [300, 17, 1, 113, 40, 2049, 700]  # document 3 is poisoned
    poisoned_doc, offset = 3, 50
    token = sum(seqlens[:poisoned_doc]) + offset
    heads_q, heads_kv = 8, 2
    p = make(seqlens, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim, seed=7,
             requires_grad=False)
    clean = run(p, None, causal=True, scale_mode=scale_mode)
    assert_finite(clean)
    t = p[tensor].clone()
    t[token, 0, 7] = math.nan  # query head 0, or KV head 0 (query heads 0 .. 3)
    p[tensor] = t
    # Poison 0, not NaN: non-finite rows pass below, so a row left unwritten over NaN would too.
    poisoned = run(p, None, poison=0.0, causal=True, scale_mode=scale_mode)
    (o_clean, lse_clean), (o_bad, lse_bad) = _row_bits(clean), _row_bits(poisoned)
    unchanged = (o_clean == o_bad).all(-1) & (lse_clean == lse_bad)
    non_finite = ~torch.isfinite(poisoned["out"].float()).all(-1) | torch.isnan(
        poisoned["lse"].transpose(0, 1))
    assert (unchanged | non_finite).all(), "a finite output row changed"
    # The first document whose key tiles (from 16 tokens before it, 128 keys each) cannot hold a
    # token of the poisoned document, and every later one: bit for bit unchanged.
    far = sum(seqlens[:poisoned_doc + 2])
    assert unchanged[far:].all()
    heads_hit = [0] if tensor == "q" else range(heads_q // heads_kv)  # KV head 0's group
    for h in heads_hit:
        assert non_finite[token, h], (token, h)
    assert not unchanged.all()  # the test can fail


# ---- determinism, compile, graphs -------------------------------------------------------------


def test_forward_is_bitwise_repeatable_and_deterministic_backward_too():
    p = make(AWKWARD, heads_q=8, heads_kv=2, head_dim=128)
    dout = torch.randn_like(p["q"])
    first = run(p, dout, causal=True, deterministic=True)
    for _ in range(2):
        again = run(p, dout, causal=True, deterministic=True)
        for name in ("out", "lse", "dq", "dk", "dv"):
            assert torch.equal(first[name], again[name]), name


@pytest.mark.parametrize("scale_mode, key_smoothing, heads_q, heads_kv, head_dim", [
    ("exact", "none", 8, 2, 128), ("block32", "first_key", 4, 4, 64),
    ("exact", "vector", 8, 2, 64), ("block32", "none", 4, 1, 128)])
def test_training_forward_keeps_its_operands_and_changes_no_bit(scale_mode, key_smoothing,
                                                                heads_q, heads_kv, head_dim):
    """With a gradient wanted, attn_varlen_func runs flamia::fwd_saving / bwd_saved (the forward
    keeps its quantized Q, K, V; the backward reads them, not q, k, v): the same bits as the
    pair that re-quantizes q, k, v in the backward (flamia::fwd / bwd), deterministic dQ too."""
    p = make(AWKWARD, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim)
    dout = torch.randn_like(p["q"])
    smoothing = key_smoothing
    vector = None
    if key_smoothing == "vector":
        vector = torch.randn(heads_kv, head_dim, device=DEVICE)
        smoothing = vector
    result = run(p, dout, causal=True, scale_mode=scale_mode, key_smoothing=smoothing,
                 deterministic=True)
    assert_finite(result)

    q, k, v = (p[n].detach() for n in ("q", "k", "v"))
    scale = 1.0 / math.sqrt(head_dim)
    args = (q, k, v, p["cu_seqlens_q"], p["cu_seqlens_k"], p["max_seqlen_q"], p["max_seqlen_k"],
            scale, True, scale_mode, key_smoothing, vector)
    out, lse, stats, _ = torch.ops.flamia.fwd(*args, "fp8", True)
    dq, dk, dv = torch.ops.flamia.bwd(dout, q, k, v, out, lse, stats, p["cu_seqlens_q"],
                                      p["cu_seqlens_k"], p["max_seqlen_q"], p["max_seqlen_k"],
                                      scale, True, scale_mode, key_smoothing, vector, "fp8", True)
    for name, plain in (("out", out), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)):
        assert torch.equal(result[name], plain), name

    # The autograd graph holds the quantized copies, not q, k, v.
    q_grad = p["q"].detach().requires_grad_()
    graph_out = flamia.attn_varlen_func(q_grad, p["k"], p["v"], p["cu_seqlens_q"],
                                        p["cu_seqlens_k"], p["max_seqlen_q"], p["max_seqlen_k"],
                                        causal=True, scale_mode=scale_mode,
                                        key_smoothing=smoothing)
    held = {t.data_ptr() for t in graph_out.grad_fn.saved_tensors
            if t is not None and t.numel() > 0}
    assert held, "no saved tensor found: the check below would pass whatever is held"
    assert not held & {p[n].data_ptr() for n in ("q", "k", "v")}


@pytest.mark.parametrize("keep_operands", ["1", "0"])
def test_training_step_fills_no_gradient_buffers(keep_operands, monkeypatch):
    """Autograd hands the backward no zero-filled gradients for the outputs without one (LSE,
    statistics, the saved-operands buffer: 402 MB of zeros on equal-2k): a training step
    launches flamia's kernels and no fill."""
    monkeypatch.setenv("FLAMIA_KEEP_OPERANDS", keep_operands)
    p = make(AWKWARD, heads_q=4, heads_kv=2, head_dim=128)
    dout = torch.randn_like(p["q"])

    def step():
        out = flamia.attn_varlen_func(p["q"], p["k"], p["v"], p["cu_seqlens_q"], p["cu_seqlens_k"],
                                      p["max_seqlen_q"], p["max_seqlen_k"], causal=True)
        out.backward(dout)

    step()  # warm-up (library load, allocator)
    for name in ("q", "k", "v"):
        p[name].grad = None
    _sync()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        _sync()
    kernels = [e.name for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    assert any("backward_kernel" in name for name in kernels), kernels
    fills = [name for name in kernels if "Fill" in name and "flamia" not in name]
    assert not fills, fills
    assert torch.isfinite(p["q"].grad).all()


def test_flash_attn_interface_matches_attn_varlen_func():
    """flamia.flash_attn_interface (FlashAttention-2's positional signatures): the same bits as
    attn_varlen_func, forward and backward, and the packed variants' gradients land in qkv / kv."""
    from flamia import flash_attn_interface as fa
    p = make(AWKWARD, heads_q=8, heads_kv=8, head_dim=64, seed=3)
    dout = torch.randn_like(p["q"])
    expected = run(p, dout, causal=True, deterministic=True, softmax_scale=0.1)
    args = [p[n] for n in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                           "max_seqlen_k")]
    for name in ("q", "k", "v"):
        p[name].grad = None
    out = fa.flash_attn_varlen_func(*args, 0.0, 0.1, True, (-1, -1), 0.0, None, True)
    out.backward(dout)
    assert torch.equal(out, expected["out"])
    for name in ("q", "k", "v"):
        assert torch.equal(p[name].grad, expected["d" + name]), name

    qkv = torch.stack([p[n].detach() for n in ("q", "k", "v")], dim=1).requires_grad_()
    out = fa.flash_attn_varlen_qkvpacked_func(qkv, p["cu_seqlens_q"], p["max_seqlen_q"], 0.0,
                                              0.1, True, deterministic=True)
    out.backward(dout)
    assert torch.equal(out, expected["out"])
    for i, name in enumerate(("q", "k", "v")):
        assert torch.equal(qkv.grad[:, i], expected["d" + name]), name

    q = p["q"].detach().requires_grad_()
    kv = torch.stack([p[n].detach() for n in ("k", "v")], dim=1).requires_grad_()
    out = fa.flash_attn_varlen_kvpacked_func(q, kv, *args[3:], 0.0, 0.1, True,
                                             deterministic=True)
    out.backward(dout)
    assert torch.equal(out, expected["out"])
    assert torch.equal(q.grad, expected["dq"])
    for i, name in enumerate(("k", "v")):
        assert torch.equal(kv.grad[:, i], expected["d" + name]), name


def test_batched_matches_varlen():
    batch, seqlen, heads_q, heads_kv, head_dim = 3, 193, 8, 2, 64
    q = torch.randn(batch, seqlen, heads_q, head_dim, device=DEVICE, dtype=BF16)
    k = torch.randn(batch, seqlen, heads_kv, head_dim, device=DEVICE, dtype=BF16)
    v = torch.randn(batch, seqlen, heads_kv, head_dim, device=DEVICE, dtype=BF16)
    out, lse = flamia.attn_func(q, k, v, causal=True, return_lse=True)
    assert out.shape == q.shape and lse.shape == (batch, heads_q, seqlen)
    cu = _cu([seqlen] * batch)
    ref_out, ref_lse = flamia.attn_varlen_func(
        q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu, seqlen, seqlen, causal=True,
        return_lse=True)
    assert torch.equal(out.flatten(0, 1), ref_out)
    assert torch.equal(lse, ref_lse.view(heads_q, batch, seqlen).transpose(0, 1))


def test_strided_inputs_match_contiguous():
    # q, k, v as views into one packed projection (token stride > heads * head_dim).
    total, heads, head_dim = 400, 4, 128
    qkv = torch.randn(total, 3, heads, head_dim, device=DEVICE, dtype=BF16)
    cu = _cu([1, 17, 113, 269])
    views = [qkv[:, i] for i in range(3)]
    copies = [t.contiguous() for t in views]
    out_views = flamia.attn_varlen_func(*views, cu, cu, 269, 269, causal=True)
    out_copies = flamia.attn_varlen_func(*copies, cu, cu, 269, 269, causal=True)
    assert torch.equal(out_views, out_copies)


def _attention_step(q, k, v, cu, max_seqlen, dout):
    out = flamia.attn_varlen_func(q, k, v, cu, cu, max_seqlen, max_seqlen, causal=True,
                                  deterministic=True)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    return out, dq, dk, dv


def test_torch_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    p = make(AWKWARD, heads_q=8, heads_kv=2, head_dim=128)
    dout = torch.randn_like(p["q"])
    q, k, v, cu = p["q"], p["k"], p["v"], p["cu_seqlens_q"]

    def step(q, k, v, cu, dout):
        out = flamia.attn_varlen_func(q, k, v, cu, cu, 2049, 2049, causal=True,
                                      deterministic=True)
        return out * 1.0

    compiled = torch.compile(step, fullgraph=True)
    out_c = compiled(q, k, v, cu, dout)
    grads_c = torch.autograd.grad(out_c, (q, k, v), dout)
    out_e = step(q, k, v, cu, dout)
    grads_e = torch.autograd.grad(out_e, (q, k, v), dout)
    assert torch.equal(out_c, out_e)
    for a, b in zip(grads_c, grads_e):
        assert torch.equal(a, b)


# "2:8": the forward overlapped in two chunks of heads on flamia's internal streams, which the
# capture must take in (and join back) through its events.
@pytest.mark.parametrize("overlap", ["off", "2:8", "3:8:1"])
def test_cuda_graph_capture_and_replay(overlap, monkeypatch):
    monkeypatch.setenv("FLAMIA_FORWARD_OVERLAP", overlap)
    p = make(AWKWARD, heads_q=8, heads_kv=2, head_dim=128)
    static = {n: p[n].detach().clone().requires_grad_() for n in ("q", "k", "v")}
    cu, max_seqlen = p["cu_seqlens_q"], p["max_seqlen_q"]
    static_dout = torch.randn_like(p["q"])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the graph (loads the library, allocates)
        for _ in range(2):
            _attention_step(static["q"], static["k"], static["v"], cu, max_seqlen, static_dout)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out = _attention_step(static["q"], static["k"], static["v"], cu, max_seqlen,
                                    static_dout)
    for seed in (3, 4):
        fresh = make(AWKWARD, heads_q=8, heads_kv=2, head_dim=128, seed=seed)
        with torch.no_grad():
            for n in ("q", "k", "v"):
                static[n].copy_(fresh[n])
            static_dout.normal_()
        graph.replay()
        _sync()
        eager = _attention_step(fresh["q"], fresh["k"], fresh["v"], cu, max_seqlen, static_dout)
        for a, b in zip(graph_out, eager):
            assert torch.equal(a, b)


# ---- sliding windows ---------------------------------------------------------------------------

WINDOW_DOCS = [1, 17, 113, 0, 300, 2049, 129]


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("window", [1, 17, 100, 128, 129, 1000])
@pytest.mark.parametrize("scale_mode", ["exact", "block32"])
def test_sliding_window_against_float64(head_dim, window, scale_mode):
    """window_size=(window - 1, 0): each query sees its document's last `window` keys. Forward
    and backward (both precisions, deterministic and not) against float64 attention with the
    same window; every output written and finite."""
    p = make(WINDOW_DOCS, heads_q=8, heads_kv=2, head_dim=head_dim, seed=window)
    dout = torch.randn_like(p["q"])
    ref = reference(p, dout, causal=True, window=window)
    # (one key: softmax over a single key has exactly zero dQ and dK, nothing to compare
    # relatively; they are checked finite)
    grads = ("dv",) if window == 1 else ("dq", "dk", "dv")
    for options in ({}, {"deterministic": True}, {"precision": "fp8-bf16grad"}):
        result = run(p, dout, window_size=(window - 1, 0), scale_mode=scale_mode, **options)
        assert_finite(result)
        err = errors(result, ref)
        assert err["out"] <= O_BOUND, (options, err)
        assert max(err[n] for n in grads) <= GRAD_BOUND, (options, err)
        lse_diff = (result["lse"].double() - ref["lse"]).abs()
        assert lse_diff[torch.isfinite(ref["lse"])].mean() <= LSE_F64_BOUND


def test_window_covering_the_documents_changes_no_bit():
    """A window as long as the longest document is plain causal attention, bit for bit (forward
    and deterministic backward); one key shorter is not."""
    p = make(WINDOW_DOCS, heads_q=8, heads_kv=2, head_dim=128, seed=4)
    dout = torch.randn_like(p["q"])
    plain = run(p, dout, causal=True, deterministic=True)
    covering = run(p, dout, window_size=(max(WINDOW_DOCS) - 1, 0), deterministic=True)
    shorter = run(p, dout, window_size=(max(WINDOW_DOCS) - 2, 0), deterministic=True)
    for name in ("out", "lse", "dq", "dk", "dv"):
        assert torch.equal(plain[name], covering[name]), name
    assert not torch.equal(plain["out"], shorter["out"])


@pytest.mark.parametrize("window", [1, 17, 200])
def test_window_rows_are_their_windows_alone(window):
    """Row i under a window equals the last row of a document made of its window's tokens alone
    (exact scales depend on a token alone; only the tiling and so the FP32 summation order
    differ), and the deterministic backward repeats bit for bit."""
    p = make([3000], heads_q=4, heads_kv=1, head_dim=64, seed=window, requires_grad=False)
    windowed = run(p, None, window_size=(window - 1, 0))
    for i in (0, window - 1, window, 777, 2999):
        begin = max(0, i - window + 1)
        alone = {n: p[n][begin:i + 1].clone() for n in ("q", "k", "v")}
        alone.update(cu_seqlens_q=_cu([i + 1 - begin]), cu_seqlens_k=_cu([i + 1 - begin]),
                     max_seqlen_q=i + 1 - begin, max_seqlen_k=i + 1 - begin)
        last = run(alone, None, causal=True)["out"][-1]
        assert rel_l2(windowed["out"][i], last) <= WINDOW_ROW_BOUND, (window, i)
    g = make([3000, 500], heads_q=4, heads_kv=1, head_dim=128, seed=9)
    dout = torch.randn_like(g["q"])
    first = run(g, dout, window_size=(window - 1, 0), deterministic=True)
    again = run(g, dout, window_size=(window - 1, 0), deterministic=True)
    for name in ("out", "lse", "dq", "dk", "dv"):
        assert torch.equal(first[name], again[name]), name


# ---- sizes beyond 32-bit offsets ---------------------------------------------------------------

# Packed documents whose q holds more than 2^31 elements (and whose FP32 dQ buffer more than 2^32
# bytes): every element index, byte offset and TMA coordinate past those limits must be right.
# Documents 65 and 129 straddle 2^31 bytes and 2^31 elements of q; the last one lies past both.
LARGE_SEQLENS = [1, 113] + [2048] * 131 + [4097]
LARGE_CHECKED_DOCS = [0, 1, 65, 129, len(LARGE_SEQLENS) - 1]
# A document alone vs the same one packed at an offset that is not a multiple of the tiles: the
# tile-aligned blocks of dS's scales (docs/numerics.md §5.7-5.8) and the key tiles fall
# elsewhere, so the two differ by up to the contract's own error on each (1e-2); a wrong offset
# gives errors of order 1.
STANDALONE_BOUND = 2e-2
ORDER_BOUND = 1e-3  # dQ added in another order (FP32 rounding only)
REFERENCE_MAX_TOKENS = 2048  # float64 attention of longer documents at 128 heads needs ~100 GB


# NaN left for the packed call of test_offsets_beyond_32_bits: its allocations live at once add
# up to 28-29 GiB (the forward's O and saved operands 9.6-9.8, dQ, dK, dV 5.2, the backward's
# workspace 13.2-13.8 with its FP32 dQ buffer of 8.8-9.4 and dO's two FP8 copies), allocated in
# that order: the 16 GiB given before left the whole workspace, dQ buffer included, in fresh
# memory. (32 GiB reserves ~3 GiB more than 16 GiB and that fresh workspace did.)
LARGE_POISON_BYTES = 1 << 35
# The forward and backward of test_one_document_of_256k_tokens allocate 3.6 GiB (head_dim 128).
LONG_POISON_BYTES = 1 << 33

# The two largest tests hold ~80 GiB at their peak: they ran out of memory on an H100's 79 GiB
# (session 43) and pass on the H200's 139 GiB
LARGE_TEST_GPU_GIB = 100


def _needs_gpu_memory(gib):
    if not torch.cuda.is_available():
        return pytest.mark.skipif(False, reason="")  # (the module's own skip applies)
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    return pytest.mark.skipif(
        total < gib,
        reason=f"needs a GPU of {gib} GiB or more (an H200); this one has {total:.0f} GiB")


@_needs_gpu_memory(LARGE_TEST_GPU_GIB)
@pytest.mark.parametrize("head_dim, heads_q, heads_kv", [(128, 64, 8), (64, 128, 16)])
def test_offsets_beyond_32_bits(head_dim, heads_q, heads_kv):
    """Forward and backward over 272k packed tokens with 2.2G elements in q: the checked
    documents match the same document run alone (and float64 attention), and every output
    element is written and finite."""
    total = sum(LARGE_SEQLENS)
    assert total * heads_q * head_dim > 2**31
    p = make(LARGE_SEQLENS, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim, seed=7)
    dout = torch.randn_like(p["q"])
    options = dict(causal=True, deterministic=True)
    torch.cuda.empty_cache()
    _poison_allocator(nbytes=LARGE_POISON_BYTES)
    packed = run(p, dout, **options)
    assert_finite(packed)
    bounds = doc_bounds(p["cu_seqlens_q"])
    for doc in LARGE_CHECKED_DOCS:
        start, end = bounds[doc]
        alone_p = {name: p[name].detach()[start:end].clone().requires_grad_()
                   for name in ("q", "k", "v")}
        alone_p.update(cu_seqlens_q=_cu([end - start]), cu_seqlens_k=_cu([end - start]),
                       max_seqlen_q=end - start, max_seqlen_k=end - start)
        alone = run(alone_p, dout[start:end], **options)
        packed_doc = {name: packed[name][start:end] for name in ("out", "dq", "dk", "dv")}
        packed_doc["lse"] = packed["lse"][:, start:end]
        for name in ("out", "dq", "dk", "dv"):
            assert rel_l2(packed_doc[name], alone[name]) <= STANDALONE_BOUND, (doc, name)
        lse_diff = (packed_doc["lse"] - alone["lse"]).abs().max().item()
        assert lse_diff <= LSE_FLIP_BOUND, (doc, lse_diff)
        # (a one-token document's exact dK is 0: softmax over one key has no gradient, so
        # its relative error is undefined; it is checked against its run alone only)
        if 1 < end - start <= REFERENCE_MAX_TOKENS:
            err = errors(packed_doc, reference(alone_p, dout[start:end], causal=True))
            assert err["out"] <= O_BOUND, (doc, err)
            assert max(err[n] for n in ("dq", "dk", "dv")) <= GRAD_BOUND, (doc, err)
    # The default backward (dQ added by bulk reductions in any order) against the deterministic
    # one: dK and dV do not depend on that order; dQ only by FP32 rounding.
    default = run(p, dout, causal=True)
    assert_finite(default)
    for name in ("out", "lse", "dk", "dv"):
        assert torch.equal(default[name], packed[name]), name
    assert rel_l2(default["dq"], packed["dq"]) <= ORDER_BOUND


LONG_DOCUMENT = 262144 + 77  # one document past 2^18 tokens: L^2 / 2 > 2^35 scores per head
LONG_TAIL_ROWS = 96  # its last rows and keys, checked against float64 attention over every key
LONG_HEAD_ROWS = 4097  # its first rows, checked against the same tokens run alone


@_needs_gpu_memory(LARGE_TEST_GPU_GIB)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_one_document_of_256k_tokens(head_dim):
    """One causal document of 262k tokens (GQA 4:1): its last rows' O and dQ and its last keys'
    dK and dV (which only those rows see) against float64 attention over all keys; its first
    rows against the same tokens alone; everything finite and written."""
    n, tail = LONG_DOCUMENT, LONG_TAIL_ROWS
    p = make([n], heads_q=8, heads_kv=2, head_dim=head_dim, seed=11)
    dout = torch.randn_like(p["q"])
    torch.cuda.empty_cache()
    _poison_allocator(nbytes=LONG_POISON_BYTES)  # run's own 256 MiB would not reach most outputs
    packed = run(p, dout, causal=True)
    assert_finite(packed)

    q_tail = p["q"].detach()[n - tail:].double().requires_grad_()
    k, v = (p[name].detach().double().requires_grad_() for name in ("k", "v"))
    scale = 1.0 / math.sqrt(head_dim)
    out, _ = attention_f64(q_tail, k, v, _cu([tail]), _cu([n]), scale, causal=True)
    out.backward(dout[n - tail:].double())
    got = dict(out=packed["out"][n - tail:], dq=packed["dq"][n - tail:],
               dk=packed["dk"][n - tail:], dv=packed["dv"][n - tail:])
    ref = dict(out=out.detach(), dq=q_tail.grad, dk=k.grad[n - tail:], dv=v.grad[n - tail:])
    err = errors(got, ref)
    assert err["out"] <= O_BOUND, err
    assert max(err[name] for name in ("dq", "dk", "dv")) <= GRAD_BOUND, err

    head = LONG_HEAD_ROWS
    alone_p = {name: p[name].detach()[:head].clone() for name in ("q", "k", "v")}
    alone_p.update(cu_seqlens_q=_cu([head]), cu_seqlens_k=_cu([head]), max_seqlen_q=head,
                   max_seqlen_k=head)
    alone = run(alone_p, None, causal=True)
    assert torch.equal(packed["out"][:head], alone["out"])  # exact mode: later keys change no bit
    assert torch.equal(packed["lse"][:, :head], alone["lse"])


# ---- edge cases, errors, observability -------------------------------------------------------


def test_no_keys_and_no_queries():
    p = make([0, 0], [4, 9], heads_q=4, heads_kv=4, head_dim=64)
    out, lse = flamia.attn_varlen_func(p["q"], p["k"], p["v"], p["cu_seqlens_q"],
                                       p["cu_seqlens_k"], 0, 9, return_lse=True)
    assert out.shape == (0, 4, 64) and lse.shape == (4, 0)
    p = make([3, 5], [0, 0], heads_q=4, heads_kv=4, head_dim=64)
    # After make (whose freed temporaries would otherwise be the outputs' memory): the zeros
    # below must be written.
    _poison_allocator()
    out, lse = flamia.attn_varlen_func(p["q"], p["k"], p["v"], p["cu_seqlens_q"],
                                       p["cu_seqlens_k"], 5, 0, return_lse=True)
    assert (out == 0).all() and (lse == -math.inf).all()
    out.float().sum().backward()
    assert (p["q"].grad == 0).all()


def test_invalid_cu_seqlens_found_on_the_device(monkeypatch):
    p = make([64, 64], heads_q=4, heads_kv=4, head_dim=64, requires_grad=False)
    bad = torch.tensor([0, 100, 64], dtype=torch.int32, device=DEVICE)  # decreasing

    def call():
        return flamia.attn_varlen_func(p["q"], p["k"], p["v"], bad, bad, 100, 100, causal=True)

    # Without the debug check nothing synchronises, and the outputs say it: all NaN.
    monkeypatch.delenv("FLAMIA_CHECK_DEVICE", raising=False)
    _poison_allocator(0.0)  # the NaN must be written
    out = call()
    _sync()
    assert torch.isnan(out).all()
    monkeypatch.setenv("FLAMIA_CHECK_DEVICE", "1")
    with pytest.raises(flamia.FlamiaError) as info:
        call()
    assert "INVALID_SEQLENS" in str(info.value)


@pytest.mark.parametrize("scale_mode", ["exact", "block32", "static"])
@pytest.mark.parametrize("tensor", ["q", "k", "v", "dout"])
def test_inf_in_an_input_makes_every_output_nan(tensor, scale_mode, monkeypatch):
    """docs/numerics.md §7: E4M3 has no Inf, and saturating one to ±448 would be a finite wrong
    value, so an Inf anywhere in q, k, v or dO makes every output of the call NaN, and
    FLAMIA_CHECK_DEVICE=1 names the tensor."""
    p = make([300, 17, 1, 113], heads_q=4, heads_kv=2, head_dim=128, seed=3)
    kwargs = dict(causal=True, scale_mode=scale_mode)
    if scale_mode == "static":
        kwargs["static_exponents"] = flamia.static_exponents(p["k"].detach(), p["v"].detach())
    dout = torch.randn_like(p["q"])
    assert_finite(run(p, dout, **kwargs))  # the test can fail
    target = dout if tensor == "dout" else p[tensor]
    with torch.no_grad():
        target[320, 1, 5] = -math.inf if tensor in ("k", "dout") else math.inf
    monkeypatch.delenv("FLAMIA_CHECK_DEVICE", raising=False)
    result = run(p, dout, poison=0.0, **kwargs)  # (the NaN must be written)
    names = ("dq", "dk", "dv") if tensor == "dout" else ("out", "lse", "dq", "dk", "dv")
    for name in names:
        assert torch.isnan(result[name].float()).all(), name
    monkeypatch.setenv("FLAMIA_CHECK_DEVICE", "1")
    with pytest.raises(RuntimeError) as info:  # a FlamiaError (autograd may wrap the backward's)
        run(p, dout, **kwargs)
    name = "d_o" if tensor == "dout" else tensor
    assert f"{name} holds an infinite value" in str(info.value)


def test_inf_in_the_last_overlapped_chunk_makes_every_output_nan(monkeypatch):
    """The forward overlapped per chunk of KV heads (each chunk's quantize pass beside the
    previous chunk's attention): an Inf in the last chunk's keys is found after the earlier
    chunks' attention has written finite outputs, and the poison after the join still makes
    every output NaN."""
    monkeypatch.setenv("FLAMIA_FORWARD_OVERLAP", "4:24")
    p = make([2048, 1000], heads_q=8, heads_kv=4, head_dim=128, seed=4, requires_grad=False)
    assert_finite(run(p, None, causal=True))
    p["k"][100, 3, 5] = math.inf  # KV head 3: the last of four chunks
    monkeypatch.delenv("FLAMIA_CHECK_DEVICE", raising=False)
    result = run(p, None, poison=0.0, causal=True)  # (the NaN must be written)
    assert torch.isnan(result["out"].float()).all() and torch.isnan(result["lse"]).all()
    monkeypatch.setenv("FLAMIA_CHECK_DEVICE", "1")
    with pytest.raises(RuntimeError, match="k holds an infinite value"):
        run(p, None, causal=True)


def test_misaligned_input_is_refused_or_correct():
    # q starting one element past an allocation: the Python checks let it through (the last
    # dimension is contiguous); the library must either refuse it with a FlamiaError
    # (a RuntimeError) or compute the same result as an aligned copy, never run on silently.
    total, heads, head_dim = 200, 4, 64
    p = make([200], heads_q=heads, heads_kv=heads, head_dim=head_dim, requires_grad=False)
    storage = torch.empty(total * heads * head_dim + 1, device=DEVICE, dtype=BF16)
    q = storage[1:].view(total, heads, head_dim)
    q.copy_(p["q"])
    args = (p["k"], p["v"], p["cu_seqlens_q"], p["cu_seqlens_k"], 200, 200)
    try:
        out = flamia.attn_varlen_func(q, *args, causal=True)
        _sync()
    except RuntimeError as exc:
        assert isinstance(exc, flamia.FlamiaError), exc
        return
    assert torch.equal(out, flamia.attn_varlen_func(p["q"], *args, causal=True))


def test_explain_and_log(monkeypatch, caplog):
    p = make([17, 113], heads_q=8, heads_kv=2, head_dim=128, requires_grad=False)
    args = [p[n] for n in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                           "max_seqlen_k")]
    text = flamia.explain(*args, causal=True, scale_mode="block32", precision="fp8-bf16grad",
                          deterministic=True)
    assert isinstance(text, str) and text.endswith("backward: fp8-bf16grad, deterministic")
    assert len(text) > len("; backward: fp8-bf16grad, deterministic")
    assert flamia.explain(*args, causal=True, scale_mode="exact") != \
        flamia.explain(*args, causal=True, scale_mode="block32")
    monkeypatch.setenv("FLAMIA_LOG", "1")
    from flamia import _ops
    _ops._logged.clear()
    with caplog.at_level("INFO", logger="flamia"):
        flamia.attn_varlen_func(*args, causal=True, scale_mode="block32")
    assert any("backward: fp8" in r.getMessage() for r in caplog.records), caplog.text
