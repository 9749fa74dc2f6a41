"""Fake/meta implementations, autograd registration and torch.compile tracing, without a GPU."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flamia

BF16 = torch.bfloat16
SEQLENS = [1, 17, 0, 113, 49]  # awkward lengths, one empty document
TOTAL = sum(SEQLENS)


def make_inputs(device, heads_q=8, heads_kv=2, head_dim=128, total_q=TOTAL, total_k=TOTAL,
                requires_grad=False):
    q = torch.randn(total_q, heads_q, head_dim, dtype=BF16, device=device)
    k = torch.randn(total_k, heads_kv, head_dim, dtype=BF16, device=device)
    v = torch.randn(total_k, heads_kv, head_dim, dtype=BF16, device=device)
    cu = torch.zeros(len(SEQLENS) + 1, dtype=torch.int32, device=device)
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v, cu


@pytest.mark.parametrize("heads_q, heads_kv, head_dim", [(8, 8, 64), (8, 2, 128), (4, 1, 64)])
def test_fake_cuda_shapes(heads_q, heads_kv, head_dim):
    with FakeTensorMode():
        q, k, v, cu = make_inputs("cuda", heads_q, heads_kv, head_dim)
        out, lse, stats, amax = torch.ops.flamia.fwd(q, k, v, cu, cu, 113, 113, 0.1, True,
                                                     "exact", "none", None, "fp8", False)
        assert out.shape == q.shape and out.dtype == BF16 and out.device.type == "cuda"
        assert lse.shape == (heads_q, TOTAL) and lse.dtype == torch.float32
        assert stats.shape == (heads_q, TOTAL, 2) and stats.dtype == torch.float32
        assert amax.shape == (0,)  # not asked for
        amax = torch.ops.flamia.fwd(q, k, v, cu, cu, 113, 113, 0.1, True, "exact", "none", None,
                                    "fp8", False, 0, None, True)[3]
        assert amax.shape == (2, heads_kv) and amax.dtype == torch.float32
        dq, dk, dv = torch.ops.flamia.bwd(out, q, k, v, out, lse, stats, cu, cu, 113, 113, 0.1,
                                          True, "block32", "first_key", None, "fp8-bf16grad",
                                          True)
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
        assert dq.dtype == dk.dtype == dv.dtype == BF16
        # The public functions accept fake CUDA tensors (all checks are shape-only).
        out2, lse2 = flamia.attn_varlen_func(q, k, v, cu, cu, 113, 113, causal=True,
                                             return_lse=True)
        assert out2.shape == q.shape and lse2.shape == (heads_q, TOTAL)


@pytest.mark.parametrize("key_smoothing", ["none", "first_key", "vector"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_fake_static_scale_history(key_smoothing, requires_grad):
    """attn_varlen_func(static_exponents=StaticScaleHistory) on fake CUDA tensors: the
    exponents from the keys as quantized at the first call, the forward's amax output recorded
    (both ops), its shape checked by the next call."""
    scales = flamia.StaticScaleHistory(margin=1, history=2, count_saturated=True)
    with FakeTensorMode():
        q, k, v, cu = make_inputs("cuda", 8, 2, 128, requires_grad=requires_grad)
        smoothing = torch.empty(2, 128, device="cuda") if key_smoothing == "vector" \
            else key_smoothing
        for step in range(3):
            out = flamia.attn_varlen_func(q, k, v, cu, cu, 113, 113, causal=True,
                                          scale_mode="static", static_exponents=scales,
                                          key_smoothing=smoothing)
            assert out.shape == q.shape
            assert len(scales._amax) == min(step + 1, 2)
            assert scales._amax[-1].shape == (2, 2) and scales._amax[-1].dtype == torch.float32
            assert scales._last_exponents.shape == (2, 2)
            assert scales._last_exponents.dtype == torch.int8
            assert scales.saturated_heads.shape == (2, 2)


def test_fake_cross_lengths():
    with FakeTensorMode():
        q, k, v, cu = make_inputs("cuda", total_q=30, total_k=70)
        out, lse = flamia.attn_varlen_func(q, k, v, cu, cu, 20, 50, return_lse=True)
        assert out.shape == (30, 8, 128) and lse.shape == (8, 30)


def test_fake_batched_shapes():
    with FakeTensorMode():
        q = torch.empty(3, 40, 8, 64, dtype=BF16, device="cuda")
        kv = torch.empty(3, 56, 2, 64, dtype=BF16, device="cuda")
        out, lse = flamia.attn_func(q, kv, kv, return_lse=True)
        assert out.shape == (3, 40, 8, 64) and out.dtype == BF16
        assert lse.shape == (3, 8, 40) and lse.dtype == torch.float32
        assert flamia.attn_func(q, q, q, causal=True).shape == q.shape


def test_meta_autograd_gives_gradient_shapes():
    q, k, v, cu = make_inputs("meta", requires_grad=True)
    out, lse = flamia.attn_varlen_func(q, k, v, cu, cu, 113, 113, causal=True, return_lse=True)
    assert out.requires_grad and not lse.requires_grad  # lse carries no gradient
    out.float().sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    assert q.grad.dtype == BF16


def test_opcheck_forward_and_backward():
    q, k, v, cu = make_inputs("meta", requires_grad=True)
    fwd_args = (q, k, v, cu, cu, 113, 113, 0.1, True, "exact", "none", None, "fp8", False)
    torch.library.opcheck(torch.ops.flamia.fwd.default, fwd_args)
    torch.library.opcheck(torch.ops.flamia.fwd.default, fwd_args + (0, None, True))
    with torch.no_grad():
        out, lse, stats, _ = torch.ops.flamia.fwd(*fwd_args)
    bwd_args = (out, q.detach(), k.detach(), v.detach(), out, lse, stats, cu, cu, 113, 113, 0.1,
                True, "exact", "none", None, "fp8", True)
    torch.library.opcheck(torch.ops.flamia.bwd.default, bwd_args)


@pytest.mark.parametrize("heads_q, heads_kv, head_dim", [(8, 2, 128), (4, 4, 64)])
def test_opcheck_training_pair(heads_q, heads_kv, head_dim):
    q, k, v, cu = make_inputs("meta", heads_q, heads_kv, head_dim, requires_grad=True)
    fwd_args = (q, k, v, cu, cu, 113, 113, 0.1, True, "block32", "first_key", None, False)
    torch.library.opcheck(torch.ops.flamia.fwd_saving.default, fwd_args)
    torch.library.opcheck(torch.ops.flamia.fwd_saving.default, fwd_args + (0, None, True))
    with torch.no_grad():
        out, lse, stats, saved, amax = torch.ops.flamia.fwd_saving(*fwd_args + (0, None, True))
    assert amax.shape == (2, heads_kv) and amax.dtype == torch.float32
    assert saved.dtype == torch.uint8 and saved.dim() == 1
    assert saved.numel() == flamia._ops.saved_operands_bytes(TOTAL, TOTAL, heads_q, heads_kv,
                                                              head_dim)
    bwd_args = (out, saved, out, lse, stats, cu, cu, TOTAL, heads_kv, 113, 113, 0.1, True,
                "block32", "first_key", None, True)
    torch.library.opcheck(torch.ops.flamia.bwd_saved.default, bwd_args)
    dq, dk, dv = torch.ops.flamia.bwd_saved(*bwd_args)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)


def test_a_wanted_gradient_selects_the_training_pair():
    torch._dynamo.reset()
    q, k, v, cu = make_inputs("meta", requires_grad=True)
    explanation = torch._dynamo.explain(_layer)(q, k, v, cu, 113)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    ops = [str(node.target) for graph in explanation.graphs for node in graph.graph.nodes]
    assert any("flamia.fwd_saving" in op for op in ops), ops
    with torch.no_grad():
        torch._dynamo.reset()
        explanation = torch._dynamo.explain(_layer)(q, k, v, cu, 113)
        ops = [str(node.target) for graph in explanation.graphs for node in graph.graph.nodes]
        assert not any("fwd_saving" in op for op in ops), ops
    out = flamia.attn_varlen_func(q, k, v, cu, cu, 113, 113, precision="fp8-bf16grad")
    assert "fwd_saving" not in str(out.grad_fn), out.grad_fn  # it reads the BF16 inputs
    assert "fwd_saving" in str(flamia.attn_varlen_func(q, k, v, cu, cu, 113, 113).grad_fn)


def test_keep_operands_can_be_turned_off(monkeypatch):
    q, k, v, cu = make_inputs("meta", requires_grad=True)
    monkeypatch.setenv(flamia._ops.KEEP_OPERANDS_ENV, "0")
    out = flamia.attn_varlen_func(q, k, v, cu, cu, 113, 113)
    assert "flamia_fwd_default" in str(out.grad_fn), out.grad_fn
    out.float().sum().backward()
    assert q.grad.shape == q.shape


def _layer(q, k, v, cu, max_seqlen):
    out, lse = flamia.attn_varlen_func(q, k, v, cu, cu, max_seqlen, max_seqlen, causal=True,
                                       scale_mode="block32", return_lse=True)
    return (out.float() * 2).sum() + lse.sum(), out


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_traces_forward_and_backward(dynamic):
    torch._dynamo.reset()
    q, k, v, cu = make_inputs("meta", requires_grad=True)
    compiled = torch.compile(_layer, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    loss, out = compiled(q, k, v, cu, 113)
    assert out.shape == q.shape
    loss.backward()
    assert q.grad.shape == q.shape and v.grad.shape == v.shape


def test_compile_has_no_graph_break():
    torch._dynamo.reset()
    q, k, v, cu = make_inputs("meta")
    explanation = torch._dynamo.explain(_layer)(q, k, v, cu, 113)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    ops = [str(node.target) for graph in explanation.graphs for node in graph.graph.nodes]
    assert any("flamia.fwd" in op for op in ops), ops


def test_compile_rejects_bad_arguments_while_tracing():
    torch._dynamo.reset()
    q, k, v, cu = make_inputs("meta")

    def bad(q, k, v, cu):
        return flamia.attn_varlen_func(q, k, v, cu, cu, 113, 113, dropout_p=0.1)

    with pytest.raises(Exception, match="dropout_p=0.1 is not supported"):
        torch.compile(bad, fullgraph=True, backend="aot_eager")(q, k, v, cu)
