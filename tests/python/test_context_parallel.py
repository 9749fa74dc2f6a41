"""Tests of flamia.context_parallel (ring attention over torch.distributed).

CPU (run anywhere): the shard plan (every token once, chunk boundaries on the 32-token grid,
balanced causal work), shard/unshard round trips, the block mask of every (query rank, key
rank) pair against true causality, the FP32 LSE merge against float64, the l_adj statistics, the
whole ring (forward and backward, 1-4 simulated ranks) with TorchBlockKernel in float64 against
float64 attention, tests showing that the l_adj and dQ-centring steps are needed (each breaks
the result when removed), and a 2-process gloo run of the autograd path.

GPU (sm_90 and libflamia.so; skipped otherwise): N = 1, 2, 4 ranks simulated in one process
with flamia's kernels against the single-GPU flamia result on the same inputs (relative L2 of O
<= 2e-2, of dQ, dK, dV <= 5e-2), for one 16k-token document and a packed long-tail batch; and
with 2 or 4 GPUs, that many real ranks over NCCL against the simulation (bit for bit,
deterministic) and the single-GPU call.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

import flamia
from flamia import context_parallel as cp
from flamia.context_parallel import (ShardPlan, TorchBlockKernel, merge_partial,
                                     shard_packed_batch, simulate_ring_attention, true_visibility)
from attention_reference import (LSE_FLIP_BOUND, LSE_MEAN_BOUND, attention_f64,
                                 poison_cuda_allocator, rel_l2)

F64 = torch.float64
BF16 = torch.bfloat16
GRID = cp.SCALE_BLOCK_TOKENS
AWKWARD = [1, 17, 113, 0, 700, 64, 2, 300, 2049]  # incl. an empty document and a 2k+1 one
# For the float64 runs of the whole ring (dense float64 scores on two CPU cores): the same
# shapes with the 2k+1 document halved (1025 = 32 * 32 + 1 still ends off the 32-token grid).
AWKWARD_RING = [1, 17, 113, 0, 700, 64, 2, 300, 1025]
EXACT_F64 = 1e-9  # the float64 ring against float64 attention: rounding only
# Ring (flamia kernels, simulated ranks) against single-GPU flamia on the same inputs.
RING_O_BOUND, RING_GRAD_BOUND = 2e-2, 5e-2
# The ring's LSE against the single GPU's: each rank's forward quantizes P̂ against its own key
# block's running max, so a row's l sums other E4M3 roundings than the single GPU's, within the
# contract's LSE_FLIP_BOUND per row and LSE_MEAN_BOUND on average. A max of 1e-2 held for the
# first seeds and failed at FLAMIA_TEST_SEED=99973529 (fp8, long_tail, 4 ranks: 0.0188;
# session 43, H200).


def small_split(world):
    """A split threshold that cuts even short documents (so tests cover split and whole ones,
    and chunks that are empty)."""
    return 2 * world * GRID


def cumulative(seqlens, device="cpu"):
    cu = [0]
    for n in seqlens:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=device)


def make_f64(seqlens, heads_q=4, heads_kv=2, dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    total = sum(seqlens)

    def randn(heads):
        return torch.randn(total, heads, dim, generator=gen, dtype=F64)

    q, k, v, dout = randn(heads_q), randn(heads_kv), randn(heads_kv), randn(heads_q)
    k = k + 2.0 * torch.randn(1, heads_kv, dim, generator=gen, dtype=F64)  # a shared component
    return dict(q=q, k=k, v=v, dout=dout, cu=cumulative(seqlens), scale=1.0 / math.sqrt(dim))


def reference_f64(data):
    q, k, v = (data[n].clone().requires_grad_() for n in ("q", "k", "v"))
    out, lse = attention_f64(q, k, v, data["cu"], data["cu"], data["scale"], True)
    out.backward(data["dout"])
    return dict(out=out.detach(), lse=lse.detach(), dq=q.grad, dk=k.grad, dv=v.grad)


def unshard_ring(plan, res):
    """Per-rank lists of out, lse, dq, dk, dv -> whole-batch tensors (lse is (heads, tokens))."""
    full = {n: plan.unshard(res[n]) for n in ("out", "dq", "dk", "dv")}
    full["lse"] = plan.unshard([x.t() for x in res["lse"]]).t()
    return full


def run_simulated(plan, data, kernel, **options):
    shards = {n: [plan.shard(data[n], r) for r in range(plan.world_size)]
              for n in ("q", "k", "v", "dout")}
    return unshard_ring(plan, simulate_ring_attention(plan, shards["q"], shards["k"], shards["v"],
                                                      shards["dout"], kernel=kernel, **options))


# ---- the plan -------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("split", ["default", "small"])
def test_plan_covers_every_token_once(world, split):
    kwargs = {} if split == "default" else dict(min_split_tokens=small_split(world))
    plan = ShardPlan.build(AWKWARD, world, **kwargs)
    seen = torch.cat([plan.token_index(r) for r in range(world)])
    assert sorted(seen.tolist()) == list(range(sum(AWKWARD)))
    doc_start = torch.repeat_interleave(torch.tensor(plan.doc_starts[:-1]),
                                        torch.tensor(AWKWARD))
    for r in range(world):
        idx = plan.token_index(r)
        assert plan.tokens(r) == idx.numel() == plan.cu_seqlens(r)[-1]
        assert len(plan.cu_seqlens(r)) == len(AWKWARD) + 1  # every rank keeps the batch size
        assert torch.equal(plan.position_ids(r), idx - doc_start[idx])
        for d in range(plan.batch):
            lo, hi = plan.front(r, d)
            assert (lo, hi) == plan.chunk(d, r)
            assert plan.back(r, d) == plan.chunk(d, 2 * world - 1 - r)
    for d, n in enumerate(AWKWARD):
        bounds = plan.bounds[d]
        assert bounds[0] == 0 and bounds[-1] == n and list(bounds) == sorted(bounds)
        # Chunk ends inside a document lie on the 32-token grid (block32 blocks are never cut).
        assert all(b % GRID == 0 for b in bounds if b != n)


def test_short_documents_are_whole_and_long_ones_split():
    world = 4
    plan = ShardPlan.build([16384, 100, 1023, 1024], world)  # default threshold 2W * 128 = 1024
    assert len(set(plan.bounds[0])) == 2 * world + 1  # split into 8 non-empty chunks
    assert len(set(plan.bounds[3])) == 2 * world + 1
    for d in (1, 2):
        holders = [r for r in range(world) if plan.local_lengths(r)[d] > 0]
        assert len(holders) == 1 and plan.local_lengths(holders[0])[d] == plan.seqlens[d]


@pytest.mark.parametrize("world", [2, 4, 8])
def test_one_long_document_is_balanced(world):
    plan = ShardPlan.build([16384], world)
    tokens = [plan.tokens(r) for r in range(world)]
    work = [plan.causal_work(r) for r in range(world)]
    assert max(tokens) - min(tokens) <= 2 * GRID
    assert sum(work) == 16384 * 16385 // 2
    assert max(work) / min(work) <= 1.01, work
    # Contiguous sharding would give the last rank (2W - 1)x the first one's work.
    for r in range(world):
        assert plan.local_lengths(r)[0] == tokens[r]


def test_long_tail_batch_is_balanced():
    gen = torch.Generator().manual_seed(3)
    lengths = [int(x) for x in (torch.rand(200, generator=gen) ** 6 * 6000).long() + 1]
    lengths[7] = 20000
    for world in (2, 4):
        plan = ShardPlan.build(lengths, world)
        work = [plan.causal_work(r) for r in range(world)]
        assert max(work) <= 1.05 * sum(work) / world, work


def test_plan_rejects_bad_arguments():
    with pytest.raises(ValueError, match="granularity"):
        ShardPlan.build([100], 2, granularity=48)
    with pytest.raises(ValueError, match="world_size"):
        ShardPlan.build([100], 0)
    with pytest.raises(ValueError, match="non-negative"):
        ShardPlan.build([-1], 2)
    with pytest.raises(ValueError, match="multiple of 32"):
        ShardPlan([100], 2, [[0, 40, 64, 96, 100]], GRID)
    with pytest.raises(ValueError, match="monotone"):
        ShardPlan([100], 2, [[0, 64, 32, 96, 100]], GRID)
    with pytest.raises(ValueError, match="span"):
        ShardPlan([100], 2, [[0, 32, 64, 100]], GRID)


def test_shard_round_trip():
    world = 3
    seqlens = AWKWARD
    total = sum(seqlens)
    q = torch.randn(total, 4, 16).to(BF16)
    k = torch.randn(total, 2, 16).to(BF16)
    v = torch.randn(total, 2, 16).to(BF16)
    plan, shards = shard_packed_batch(q, k, v, cumulative(seqlens), world,
                                      min_split_tokens=small_split(world))
    for r, shard in enumerate(shards):
        assert shard["cu_seqlens"].dtype == torch.int32
        assert shard["cu_seqlens"].tolist() == plan.cu_seqlens(r)
        assert shard["max_seqlen"] == max(plan.local_lengths(r))
        assert shard["q"].shape == (plan.tokens(r), 4, 16)
    for name, x in (("q", q), ("k", k), ("v", v)):
        back = cp.unshard_packed(plan, [s[name] for s in shards])
        assert torch.equal(back.view(torch.int16), x.view(torch.int16))  # bitwise
    with pytest.raises(ValueError, match="tokens"):
        plan.shard(q[:-1], 0)
    with pytest.raises(ValueError, match="shard 1"):
        plan.unshard([shards[0]["q"], shards[0]["q"], shards[2]["q"]])


# ---- block masks ----------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("seqlens", [AWKWARD, [4096], [0, 5, 0], [64, 64, 64, 64, 64]])
def test_block_masks_are_the_causal_mask(world, seqlens):
    plan = ShardPlan.build(seqlens, world, min_split_tokens=small_split(world))
    covered = 0
    for r in range(world):
        for s in range(world):
            layout = plan.block(r, s)
            expected_kind = ("diagonal" if r == s else "front_keys" if r > s else "back_queries")
            assert layout.kind == expected_kind
            assert layout.causal == (r == s)
            if layout.causal:  # flamia's causal documents need equal lengths
                assert layout.q_lens == layout.k_lens
            assert layout.cu_q[-1] == plan.tokens(r) and layout.cu_k[-1] == plan.tokens(s)
            mask = layout.visible()
            assert torch.equal(mask, true_visibility(plan, r, s)), (r, s)
            covered += int(mask.sum())
    assert covered == sum(n * (n + 1) // 2 for n in seqlens)  # every causal pair exactly once


# ---- LSE merge and l_adj ---------------------------------------------------------------------


@pytest.mark.parametrize("blocks", [1, 2, 5])
def test_lse_merge_against_float64(blocks):
    gen = torch.Generator().manual_seed(blocks)
    heads, tokens, keys, dim = 3, 40, 96, 8
    s = 4.0 * torch.randn(heads, tokens, keys, generator=gen, dtype=F64)
    v = torch.randn(heads, keys, dim, generator=gen, dtype=F64)
    visible = torch.rand(heads, tokens, keys, generator=gen) < 0.7
    visible[:, 0] = False  # a row no block sees
    visible[:, 1, : keys // 2] = False  # a row the first blocks do not see
    s = s.masked_fill(~visible, -math.inf)
    ref_lse = torch.logsumexp(s, dim=2)
    ref_out = torch.where(visible.any(dim=2, keepdim=True),
                          torch.softmax(s, dim=2).nan_to_num(0.0) @ v, 0.0)
    out_acc = torch.zeros(tokens, heads, dim)
    lse_acc = torch.full((heads, tokens), -math.inf)
    for cols in torch.arange(keys).chunk(blocks):
        sb, vb = s[:, :, cols].float(), v[:, cols].float()
        lse_b = torch.logsumexp(sb, dim=2)  # -inf where the block sees nothing
        p = torch.exp(sb - torch.where(torch.isfinite(lse_b), lse_b, 0.0).unsqueeze(2))
        out_b = (p @ vb).transpose(0, 1).to(BF16)  # blocks arrive as BF16, as flamia's
        merge_partial(out_acc, lse_acc, out_b, lse_b)
    assert not torch.isnan(out_acc).any() and not torch.isnan(lse_acc).any()
    assert torch.equal(lse_acc[:, 0], torch.full((heads,), -math.inf))
    assert (out_acc[0] == 0).all()
    finite = torch.isfinite(ref_lse)
    assert (lse_acc.double()[finite] - ref_lse[finite]).abs().max() <= 1e-5
    assert rel_l2(out_acc, ref_out.transpose(0, 1)) <= 4e-3  # BF16 block outputs


@pytest.mark.parametrize("key_smoothing", ["none", "first_key"])
def test_adjusted_stats_give_global_probabilities(key_smoothing):
    """Two key blocks of one non-causal document: with l_adj each block's rebuilt
    P = exp2(t - M + 8) / l_adj equals the softmax over all keys."""
    data = make_f64([50], heads_q=2, heads_kv=2, dim=16)
    kernel = TorchBlockKernel(data["scale"], key_smoothing=key_smoothing)
    q, k, v = data["q"], data["k"], data["v"]
    cu_q = torch.tensor([0, 50], dtype=torch.int32)
    splits = [(0, 20), (20, 50)]
    lse_acc = torch.full((2, 50), -math.inf, dtype=F64)
    out_acc = torch.zeros(50, 2, 16, dtype=F64)
    parts = []
    for a, b in splits:
        cu_k = torch.tensor([0, b - a], dtype=torch.int32)
        out_b, lse_b, stats_b = kernel.forward(q, k[a:b], v[a:b], cu_q, cu_k, 50, b - a, False)
        merge_partial(out_acc, lse_acc, out_b, lse_b)
        parts.append((a, b, lse_b, stats_b))
    s_all = data["scale"] * torch.einsum("thd,khd->htk", q, k)
    p_ref = torch.softmax(s_all, dim=2)
    for a, b, lse_b, stats_b in parts:
        adj = cp.adjusted_stats(stats_b, lse_b, lse_acc)
        qd, kd = q.transpose(0, 1), k[a:b].transpose(0, 1)
        t, _ = kernel._scores(qd, kd, False)
        p = torch.exp2(t - adj[..., :1] + cp.P_OFFSET) / adj[..., 1:]
        assert torch.allclose(p, p_ref[:, :, a:b], rtol=1e-12, atol=1e-15)
        # Without smoothing, l_adj = exp(LSE - (M - 8) ln 2) (the form in the design notes).
        brief = torch.exp(lse_acc - (stats_b[..., 0] - cp.P_OFFSET) * cp.LN2)
        same = torch.allclose(brief, adj[..., 1], rtol=1e-12)
        assert same == (key_smoothing == "none")


# ---- the whole ring in float64 (TorchBlockKernel) -------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("key_smoothing, centered_dq",
                         [("none", True), ("first_key", True), ("none", False)])
def test_simulated_ring_is_exact_in_float64(world, key_smoothing, centered_dq):
    data = make_f64(AWKWARD_RING, seed=world)
    plan = ShardPlan.build(AWKWARD_RING, world, min_split_tokens=small_split(world))
    kernel = TorchBlockKernel(data["scale"], key_smoothing=key_smoothing,
                              centered_dq=centered_dq)
    ring = run_simulated(plan, data, kernel)
    ref = reference_f64(data)
    assert (ring["lse"] - ref["lse"]).abs().max() <= EXACT_F64
    for name in ("out", "dq", "dk", "dv"):
        assert torch.isfinite(ring[name]).all(), name
        assert rel_l2(ring[name], ref[name]) <= EXACT_F64, name


@pytest.mark.parametrize("world", [2, 3])
def test_kept_block_outputs_give_the_same_ring(world):
    """keep_block_outputs: the dQ correction reads the forward's own O_b, LSE_b instead of
    running the block's forward again; the kernel is deterministic, so every result is bit for
    bit the recomputing ring's."""
    data = make_f64(AWKWARD_RING, seed=world)
    plan = ShardPlan.build(AWKWARD_RING, world, min_split_tokens=small_split(world))
    kernel = TorchBlockKernel(data["scale"], key_smoothing="first_key", centered_dq=True)
    calls = {"forward": 0}
    forward = kernel.forward

    def counting_forward(*args):
        calls["forward"] += 1
        return forward(*args)

    kernel.forward = counting_forward
    recomputed = run_simulated(plan, data, kernel)
    recomputing_calls, calls["forward"] = calls["forward"], 0
    kept = run_simulated(plan, data, kernel, keep_block_outputs=True)
    assert recomputing_calls == world * world + world * (world - 1)  # ring + one per correction
    assert calls["forward"] == world * world
    for name in ("out", "lse", "dq", "dk", "dv"):
        assert torch.equal(kept[name], recomputed[name]), name


@pytest.mark.parametrize("world", [2, 4])
def test_simulated_ring_with_flamia_dtypes(world):
    """BF16 inputs with FP32 statistics and BF16 block outputs and gradients, as flamia's ops
    return them, and large logits (LSE far from 0, where l_adj's FP32 exponent matters): the
    ring stays at BF16 rounding distance from one call on the whole batch."""
    data = make_f64(AWKWARD_RING, seed=2)
    bf16 = {n: data[n].to(BF16) for n in ("q", "k", "v", "dout")}
    bf16["q"] = (4.0 * data["q"]).to(BF16)
    bf16.update(cu=data["cu"], scale=data["scale"])
    kernel = TorchBlockKernel(data["scale"], centered_dq=True)
    one = run_simulated(ShardPlan.build(AWKWARD_RING, 1), bf16, kernel)
    plan = ShardPlan.build(AWKWARD_RING, world, min_split_tokens=small_split(world))
    ring = run_simulated(plan, bf16, kernel)
    assert ring["lse"].dtype == torch.float32
    assert (ring["lse"] - one["lse"]).abs().max() <= 1e-4
    for name in ("out", "dq", "dk", "dv"):
        assert ring[name].dtype == BF16 and torch.isfinite(ring[name]).all(), name
        assert rel_l2(ring[name], one[name]) <= 1.5e-2, name


def test_ring_without_l_adj_is_wrong(monkeypatch):
    """The backward with each block's own {M, l} normalizes P per block: wrong gradients."""
    data = make_f64(AWKWARD_RING)
    plan = ShardPlan.build(AWKWARD_RING, 2, min_split_tokens=small_split(2))
    monkeypatch.setattr(cp, "adjusted_stats", lambda stats, lse_b, lse: stats.contiguous())
    ring = run_simulated(plan, data, TorchBlockKernel(data["scale"], centered_dq=False))
    ref = reference_f64(data)
    assert rel_l2(ring["out"], ref["out"]) <= EXACT_F64  # the forward does not use it
    assert min(rel_l2(ring[n], ref[n]) for n in ("dq", "dk", "dv")) > 1e-2


def test_ring_without_dq_centring_correction_is_wrong(monkeypatch):
    """flamia's FP8 dQ is centred on each call document's first key; a block's row of dS does
    not sum to zero, so without the correction dQ is wrong (dK and dV are not affected)."""
    data = make_f64(AWKWARD_RING)
    plan = ShardPlan.build(AWKWARD_RING, 2, min_split_tokens=small_split(2))
    monkeypatch.setattr(cp, "_center_correction", lambda *args: None)
    ring = run_simulated(plan, data, TorchBlockKernel(data["scale"], centered_dq=True))
    ref = reference_f64(data)
    assert rel_l2(ring["dq"], ref["dq"]) > 1e-2
    assert rel_l2(ring["dk"], ref["dk"]) <= EXACT_F64
    assert rel_l2(ring["dv"], ref["dv"]) <= EXACT_F64


def test_simulation_rejects_wrong_shards():
    data = make_f64(AWKWARD)
    plan = ShardPlan.build(AWKWARD, 2, min_split_tokens=small_split(2))
    q = [plan.shard(data["q"], r) for r in range(2)]
    k = [plan.shard(data["k"], r) for r in range(2)]
    with pytest.raises(ValueError, match="tokens"):
        simulate_ring_attention(plan, q[::-1], k, k, kernel=TorchBlockKernel(0.25))
    with pytest.raises(ValueError, match="one shard per rank"):
        simulate_ring_attention(plan, q[:1], k[:1], k[:1], kernel=TorchBlockKernel(0.25))


def test_plan_rejects_ranks_outside_it():
    """A rank outside [0, W) used to index another rank's chunks: plan.shard(x, W) returned
    rank W-1's tokens in another order, negative ranks and larger ones raised IndexError."""
    plan = ShardPlan.build(AWKWARD, 2, min_split_tokens=small_split(2))
    x = torch.arange(sum(AWKWARD))
    for rank in (2, -1, 5, True, 1.0):
        for call in (lambda: plan.shard(x, rank), lambda: plan.tokens(rank),
                     lambda: plan.position_ids(rank), lambda: plan.cu_seqlens(rank),
                     lambda: plan.causal_work(rank), lambda: plan.block(0, rank)):
            with pytest.raises(ValueError, match=r"not a rank of this plan.*\[0, 2\)"):
                call()
    assert torch.equal(plan.shard(x, torch.tensor(1)), plan.shard(x, 1))


def test_from_cu_seqlens_rejects_what_is_not_cu_seqlens():
    with pytest.raises(ValueError, match="1-D integer tensor"):
        ShardPlan.from_cu_seqlens(torch.tensor([[0, 3]]), 2)
    with pytest.raises(ValueError, match="1-D integer tensor"):
        ShardPlan.from_cu_seqlens(torch.tensor([0.0, 2.5, 5.0]), 2)  # was truncated silently
    with pytest.raises(ValueError, match="start at 0"):
        ShardPlan.from_cu_seqlens(torch.tensor([3, 10], dtype=torch.int32), 2)
    with pytest.raises(TypeError, match="cu_seqlens must be a torch.Tensor"):
        ShardPlan.from_cu_seqlens([0, 3], 2)
    assert ShardPlan.from_cu_seqlens(cumulative(AWKWARD), 2).seqlens == tuple(AWKWARD)


def test_unshard_rejects_shards_of_other_shapes():
    plan = ShardPlan.build(AWKWARD, 2, min_split_tokens=small_split(2))
    parts = [plan.shard(torch.zeros(sum(AWKWARD), 4, 16), r) for r in range(2)]
    with pytest.raises(ValueError, match="shard 1 is"):
        plan.unshard([parts[0], parts[1][:, :2]])
    with pytest.raises(ValueError, match="shard 1 is"):
        plan.unshard([parts[0], parts[1].double()])


def test_simulation_checks_shards_before_any_kernel():
    """Bad shards give ValueError/TypeError naming the problem (were IndexError from the
    default kernel's head_dim, ZeroDivisionError, or errors inside the kernel or the
    backward)."""
    data = make_f64(AWKWARD)
    plan = ShardPlan.build(AWKWARD, 2, min_split_tokens=small_split(2))
    q, k, dout = ([plan.shard(data[n], r) for r in range(2)] for n in ("q", "k", "dout"))
    kernel = TorchBlockKernel(0.25)
    with pytest.raises(ValueError, match=r"q must be \(tokens, heads, head_dim\)"):
        simulate_ring_attention(plan, [x[:, 0] for x in q], k, k)  # default kernel
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        simulate_ring_attention(plan, [x.tolist() for x in q], k, k)
    with pytest.raises(ValueError, match="k has no heads"):
        simulate_ring_attention(plan, q, [x[:, :0] for x in k], [x[:, :0] for x in k],
                                kernel=kernel)
    with pytest.raises(ValueError, match="q has head_dim 16 but k has 8"):
        simulate_ring_attention(plan, q, [x[..., :8] for x in k], [x[..., :8] for x in k],
                                kernel=kernel)
    with pytest.raises(TypeError, match="same dtype"):
        simulate_ring_attention(plan, q, k, [x.float() for x in k], kernel=kernel)
    with pytest.raises(ValueError, match="douts: one shard per rank"):
        simulate_ring_attention(plan, q, k, k, dout[:1], kernel=kernel)
    with pytest.raises(ValueError, match=r"douts\[0\] must be shaped like qs\[0\]"):
        simulate_ring_attention(plan, q, k, k, dout[::-1], kernel=kernel)


def test_options_given_with_a_kernel_are_an_error():
    """kernel= replaces flamia's kernels, and the flamia options beside it were ignored."""
    data = make_f64(AWKWARD)
    plan = ShardPlan.build(AWKWARD, 2, min_split_tokens=small_split(2))
    q, k = ([plan.shard(data[n], r) for r in range(2)] for n in ("q", "k"))
    for options in (dict(softmax_scale=0.1), dict(deterministic=True),
                    dict(precision="fp8-bf16grad"), dict(key_smoothing="first_key")):
        with pytest.raises(ValueError, match=f"{next(iter(options))} given together with "
                                             "kernel="):
            simulate_ring_attention(plan, q, k, k, kernel=TorchBlockKernel(0.25), **options)


def test_ring_attention_checks_the_shard_before_the_default_kernel(tmp_path):
    """ring_attention (one gloo rank) with a q that isn't 3-D: ValueError from its own shape
    check (was IndexError reading q.shape[2] for the default softmax scale)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed with gloo and no process group yet")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                            world_size=1)
    try:
        data = make_f64([5, 3])
        plan = ShardPlan.build([5, 3], 1)
        q, k = data["q"], data["k"]
        with pytest.raises(ValueError, match=r"q must be \(tokens, heads, head_dim\)"):
            cp.ring_attention(q[:, 0], k, k, plan)
        with pytest.raises(ValueError, match="deterministic given together with kernel="):
            cp.ring_attention(q, k, k, plan, kernel=TorchBlockKernel(0.25), deterministic=True)
        out = cp.ring_attention(q, k, k, plan, kernel=TorchBlockKernel(data["scale"]))
        ref, _ = attention_f64(q, k, k, data["cu"], data["cu"], data["scale"], True)
        assert rel_l2(out, ref) <= EXACT_F64
    finally:
        dist.destroy_process_group()


def test_lockstep_driver_detects_mismatched_exchanges():
    def program(size):
        handle = yield cp._Post(torch.zeros(size), torch.zeros(size))
        yield cp._Wait(handle)
        return size

    assert cp._drive_lockstep([program(3), program(3)]) == [3, 3]
    with pytest.raises(RuntimeError, match="ring exchange 0"):
        cp._drive_lockstep([program(3), program(4)])


def test_torch_block_kernel_rejects_unequal_causal_documents():
    kernel = TorchBlockKernel(0.25)
    x = torch.zeros(5, 1, 8, dtype=F64)
    cu_q, cu_k = torch.tensor([0, 2], dtype=torch.int32), torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match="equal"):
        kernel.forward(x[:2], x, x, cu_q, cu_k, 2, 5, True)


def test_flamia_block_kernel_options():
    assert cp.FlamiaBlockKernel(softmax_scale=0.1).centers_dq_keys
    assert cp.FlamiaBlockKernel(softmax_scale=0.1, precision="fp8-bf16grad").centers_dq_keys
    with pytest.raises(ValueError, match="scale_mode"):
        cp.FlamiaBlockKernel(softmax_scale=0.1, scale_mode="block16")
    with pytest.raises(ValueError, match="precision"):
        cp.FlamiaBlockKernel(softmax_scale=0.1, precision="bf16")
    with pytest.raises(ValueError, match="key_smoothing"):
        cp.FlamiaBlockKernel(softmax_scale=0.1, key_smoothing="mean")


# ---- two processes over gloo (the torch.distributed path, autograd) --------------------------

GLOO_SEQLENS = [1, 300, 17, 260, 0, 113]


def _gloo_worker(rank, world, init_file, seqlens, keep_block_outputs):
    import torch.distributed as dist

    torch.set_num_threads(1)  # two processes on a small CPU: no oversubscription
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        data = make_f64(seqlens, seed=11)
        plan = ShardPlan.build(seqlens, world, min_split_tokens=small_split(world))
        q, k, v = (plan.shard(data[n], rank).requires_grad_() for n in ("q", "k", "v"))
        kernel = TorchBlockKernel(data["scale"], key_smoothing="first_key", centered_dq=True)
        out, lse = cp.ring_attention(q, k, v, plan, kernel=kernel, return_lse=True,
                                     keep_block_outputs=keep_block_outputs)
        out.backward(plan.shard(data["dout"], rank))
        ref = reference_f64(data)
        assert rel_l2(out, plan.shard(ref["out"], rank)) <= EXACT_F64
        assert (lse - plan.shard(ref["lse"].t(), rank).t()).abs().max() <= EXACT_F64
        for name, got in (("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
            assert rel_l2(got, plan.shard(ref[name], rank)) <= EXACT_F64, name
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("keep_block_outputs", [False, True])
def test_gloo_two_ranks_autograd(tmp_path, keep_block_outputs):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    world = 2
    mp.spawn(_gloo_worker, args=(world, str(tmp_path / "rendezvous"), GLOO_SEQLENS,
                                 keep_block_outputs),
             nprocs=world, join=True)


# ---- GPU: simulated ranks with flamia's kernels against single-GPU flamia -------------------


def _gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"flamia needs an sm_90 (Hopper) GPU; this one is sm_{major}{minor}"
    try:
        flamia.load_library()
    except flamia.LibraryNotFound as exc:
        return f"libflamia.so not found ({exc})"
    return None


_GPU_SKIP = _gpu_skip_reason()
requires_gpu = pytest.mark.skipif(_GPU_SKIP is not None, reason=str(_GPU_SKIP))

GPU_CASES = {
    "doc16k": [16384],
    "long_tail": [9000, 3000, 2049, 1100, 700, 513, 300, 113, 17, 1, 0, 64, 2500],
}


# The single-GPU call on "long_tail" (19k tokens) allocates 273 MiB while it runs ("doc16k": 231;
# O, the saved operands, dQ, dK, dV, the backward's workspace with its FP32 dQ buffer), more than
# the 256 MiB once given (that workspace, allocated last, fell outside it). 1 GiB: the same with
# room for the simulated ranks' accumulators beside their block calls.
POISON_BYTES = 1 << 30


def _poison_allocator(nbytes=POISON_BYTES):
    """NaN in every free block of the caching allocator and in one of at least `nbytes`
    (attention_reference.poison_cuda_allocator), so unwritten outputs show as NaN. (A single NaN
    tensor reached no output of 1 MiB or less, every LSE among them, nor any that fit a smaller
    free block.)"""
    poison_cuda_allocator(math.nan, nbytes)


def _gpu_inputs(seqlens, seed, heads_q=8, heads_kv=2, dim=128, device="cuda"):
    """The same numbers on every GPU of a machine (a seeded generator per device), fresh per run
    (the run's FLAMIA_TEST_SEED, conftest.py, reaches every rank through the environment)."""
    run_seed = int(os.environ.get("FLAMIA_TEST_SEED", "0"))
    # kept to 64 bits: torch refuses larger seeds, and a C++ run's printed seed has 64
    mixed = ((run_seed << 16) ^ seed) & 0xFFFF_FFFF_FFFF_FFFF
    gen = torch.Generator(device=device).manual_seed(mixed)
    total = sum(seqlens)

    def randn(heads):
        return torch.randn(total, heads, dim, generator=gen, device=device).to(BF16)

    return dict(q=randn(heads_q), k=randn(heads_kv), v=randn(heads_kv), dout=randn(heads_q),
                cu=cumulative(seqlens, device), max_seqlen=max(seqlens))


def _single_gpu(data, **options):
    q, k, v = (data[n].clone().requires_grad_() for n in ("q", "k", "v"))
    _poison_allocator()
    out, lse = flamia.attn_varlen_func(q, k, v, data["cu"], data["cu"], data["max_seqlen"],
                                       data["max_seqlen"], causal=True, return_lse=True,
                                       **options)
    out.backward(data["dout"])
    torch.cuda.synchronize()
    return dict(out=out.detach(), lse=lse, dq=q.grad, dk=k.grad, dv=v.grad)


def _ring_gpu(data, seqlens, world, **options):
    plan = ShardPlan.build(seqlens, world)
    shards = {n: [plan.shard(data[n], r) for r in range(world)]
              for n in ("q", "k", "v", "dout")}
    _poison_allocator()
    res = simulate_ring_attention(plan, shards["q"], shards["k"], shards["v"], shards["dout"],
                                  **options)
    torch.cuda.synchronize()
    return unshard_ring(plan, res)


def _assert_close_to_single_gpu(ring, single):
    for name in ("out", "dq", "dk", "dv", "lse"):
        assert not torch.isnan(ring[name]).any(), f"{name} has NaN"
    for name in ("out", "dq", "dk", "dv"):
        assert torch.isfinite(ring[name]).all(), f"{name} has Inf"
    errors = {n: rel_l2(ring[n], single[n]) for n in ("out", "dq", "dk", "dv")}
    assert errors["out"] <= RING_O_BOUND, errors
    assert max(errors["dq"], errors["dk"], errors["dv"]) <= RING_GRAD_BOUND, errors
    lse_diff = (ring["lse"] - single["lse"]).abs()
    assert lse_diff.max() <= LSE_FLIP_BOUND, (lse_diff.max(), errors)
    assert lse_diff.mean() <= LSE_MEAN_BOUND, (lse_diff.mean(), errors)
    return errors


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", sorted(GPU_CASES))
@pytest.mark.parametrize("precision", ["fp8", "fp8-bf16grad"])
def test_gpu_simulated_ring_matches_single_gpu(world, case, precision):
    seqlens = GPU_CASES[case]
    data = _gpu_inputs(seqlens, seed=world)
    single = _single_gpu(data, precision=precision)
    ring = _ring_gpu(data, seqlens, world, precision=precision)
    _assert_close_to_single_gpu(ring, single)


@pytest.mark.gpu
@requires_gpu
def test_gpu_kept_block_outputs_give_the_same_ring():
    """keep_block_outputs with flamia's kernels: bit for bit the recomputing ring (the forward
    is deterministic; the deterministic backward makes dQ repeatable)."""
    seqlens = GPU_CASES["long_tail"]
    data = _gpu_inputs(seqlens, seed=4)
    recomputed = _ring_gpu(data, seqlens, 2, deterministic=True)
    kept = _ring_gpu(data, seqlens, 2, deterministic=True, keep_block_outputs=True)
    for name in ("out", "lse", "dq", "dk", "dv"):
        assert torch.equal(kept[name], recomputed[name]), name


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("world", [2, 4])
def test_gpu_simulated_ring_block32(world):
    seqlens = GPU_CASES["long_tail"]
    data = _gpu_inputs(seqlens, seed=7)
    single = _single_gpu(data, scale_mode="block32")
    ring = _ring_gpu(data, seqlens, world, scale_mode="block32")
    _assert_close_to_single_gpu(ring, single)


@pytest.mark.gpu
@requires_gpu
def test_gpu_one_rank_is_the_single_gpu_call():
    """With one rank the ring is one flamia call on the unchanged batch: bitwise equal."""
    seqlens = GPU_CASES["long_tail"]
    data = _gpu_inputs(seqlens, seed=1)
    single = _single_gpu(data, deterministic=True)
    ring = _ring_gpu(data, seqlens, 1, deterministic=True)
    for name in ("out", "dq", "dk", "dv", "lse"):
        assert torch.equal(ring[name], single[name]), name


@pytest.mark.gpu
@requires_gpu
def test_gpu_first_key_smoothing_against_float64():
    """With first_key smoothing each block subtracts its own first key (a key every query of
    the block sees), so K̂ differs from the single-GPU call: compared with float64 instead."""
    seqlens = [1500, 113, 17, 700]
    data = _gpu_inputs(seqlens, seed=5)
    ring = _ring_gpu(data, seqlens, 2, key_smoothing="first_key")
    single = _single_gpu(data, key_smoothing="first_key")
    scale = 1.0 / math.sqrt(data["q"].shape[2])
    ref = reference_f64(dict(q=data["q"].double(), k=data["k"].double(), v=data["v"].double(),
                             dout=data["dout"].double(), cu=data["cu"], scale=scale))
    for name in ("out", "dq", "dk", "dv"):
        assert torch.isfinite(ring[name]).all(), name
        own = rel_l2(single[name], ref[name])
        assert rel_l2(ring[name], ref[name]) <= 1.25 * own + 5e-3, (name, own)


# ---- several GPUs: real ranks over NCCL ----------------------------------------------------------

NCCL_SEED = 3


def _nccl_worker(rank, world, init_file, out_dir, seqlens, options):
    """One rank on GPU `rank`: ring attention forward and backward of its shard over NCCL; saves
    its shard of out, lse, dq, dk, dv for the parent to compare."""
    import os

    import torch.distributed as dist

    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off (before NCCL starts)
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, device_id=device)
    try:
        data = _gpu_inputs(seqlens, NCCL_SEED, device=device)
        plan = ShardPlan.build(seqlens, world)
        q, k, v = (plan.shard(data[n], rank).requires_grad_() for n in ("q", "k", "v"))
        _poison_allocator()
        out, lse = cp.ring_attention(q, k, v, plan, return_lse=True, **options)
        out.backward(plan.shard(data["dout"], rank))
        torch.cuda.synchronize()
        result = dict(out=out.detach(), lse=lse, dq=q.grad, dk=k.grad, dv=v.grad)
        torch.save({n: t.cpu() for n, t in result.items()}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_nccl_ranks_match_the_simulation_and_single_gpu(world, case, tmp_path):
    """`world` processes, one per GPU, over NCCL: the deterministic ring is bit for bit the
    one-process simulation of the same ranks (same kernels, same merges; only the transport
    differs), and within the simulation's bounds of the single-GPU call."""
    import os

    import torch.multiprocessing as mp

    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs, {torch.cuda.device_count()} visible")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    seqlens, options = GPU_CASES[case], dict(deterministic=True)
    mp.spawn(_nccl_worker, args=(world, str(tmp_path / "rendezvous"), str(tmp_path), seqlens,
                                 options), nprocs=world, join=True)
    parts = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    plan = ShardPlan.build(seqlens, world)
    real = unshard_ring(plan, {n: [part[n].cuda() for part in parts] for n in parts[0]})
    data = _gpu_inputs(seqlens, NCCL_SEED)
    simulated = _ring_gpu(data, seqlens, world, **options)
    for name in ("out", "lse", "dq", "dk", "dv"):
        assert torch.equal(real[name], simulated[name]), name
    _assert_close_to_single_gpu(real, _single_gpu(data, **options))
