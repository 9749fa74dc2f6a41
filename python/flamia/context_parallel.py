"""Context parallelism: ring attention over torch.distributed for packed causal documents.

Each of W ranks holds a load-balanced shard of every long document (zig-zag: the document is cut
into 2W chunks at multiples of 32 tokens and rank r keeps chunks r and 2W-1-r), keeps its queries,
and passes its keys and values around the ring with isend/irecv while it computes the current
block with flamia's forward. Block outputs are merged with their log-sum-exp (FP32). The
backward runs the ring again with flamia's backward per block; dK and dV travel back to their
owners and are summed. Design, numerics and what was tested: docs/context-parallel.md.

    import torch.distributed as dist
    from flamia.context_parallel import ShardPlan, ring_attention

    plan = ShardPlan.build(seqlens, dist.get_world_size())      # the same on every rank
    rank = dist.get_rank()
    q_r, k_r, v_r = (plan.shard(x, rank) for x in (q, k, v))    # or load only the shard
    out_r = ring_attention(q_r, k_r, v_r, plan)                 # differentiable
    positions = plan.position_ids(rank)                         # positions for RoPE

`simulate_ring_attention` runs the same per-rank code for all ranks in one process (the ring
exchanges become copies), which is how the equality with the single-GPU kernel is tested.
`TorchBlockKernel` is a pure-PyTorch stand-in for flamia's kernels with the same conventions
({M, l} statistics, dQ centred on each document's first key), for CPU tests.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Generator, Optional, Sequence

import torch
from torch import Tensor

from ._checks import _check_count

# Chunk boundaries fall on multiples of this many tokens inside each document: block32 scale
# blocks (docs/numerics.md §2) restart at each document start and must never be cut by a shard.
SCALE_BLOCK_TOKENS = 32
# A document is cut into 2W chunks only when each chunk gets at least this many tokens (one key
# tile of the kernels); shorter documents go whole to the least loaded rank.
DEFAULT_MIN_CHUNK_TOKENS = 128
# Whole-document placement cost per token on top of the causal pairs (L^2 / 2): the per-token
# work (quantize passes, row statistics, tile edges) that makes many tiny documents cost more
# than their pairs alone.
PLACEMENT_TOKEN_COST = 64
# flamia's P̂ offset (docs/numerics.md §4 step 4): l is in units of 2^(M - 8).
P_OFFSET = 8
LN2 = math.log(2.0)
LOG2E = math.log2(math.e)
KV_PARTS = 2  # keys and values travel in one buffer: (2, tokens, heads_kv, head_dim)


# ---- sharding -----------------------------------------------------------------------------------


class ShardPlan:
    """Which tokens of a packed batch each of `world_size` ranks holds, and in which order.

    Every document d is described by 2W + 1 boundaries 0 = b_0 <= ... <= b_2W = L_d (chunk c is
    tokens [b_c, b_c+1) of the document). Rank r holds chunk r (its "front") and chunk 2W-1-r
    (its "back"); its packed shard lists, document by document, the front then the back, so that
    every rank's shard has the global batch size (documents may be empty) and its own
    cu_seqlens. Documents of at least `min_split_tokens` tokens are cut into 2W chunks of nearly
    equal length (boundaries rounded to multiples of `granularity`), which gives every rank the
    same causal work per ring step; shorter ones go whole (as a front chunk) to the rank with the
    least work so far (greedy, largest first). The plan is a pure function of its arguments, so
    every rank builds the same one without communicating.
    """

    def __init__(self, seqlens: Sequence[int], world_size: int, bounds: Sequence[Sequence[int]],
                 granularity: int):
        self.seqlens = tuple(int(n) for n in seqlens)
        self.world_size = int(world_size)
        self.bounds = tuple(tuple(int(b) for b in doc) for doc in bounds)
        self.granularity = int(granularity)
        self._check()
        self.doc_starts = [0]
        for n in self.seqlens:
            self.doc_starts.append(self.doc_starts[-1] + n)
        self._local_lengths = [
            [self._chunk_len(r, d, "front") + self._chunk_len(r, d, "back")
             for d in range(self.batch)] for r in range(self.world_size)]
        self._device_cache: dict = {}

    # -- construction --

    @classmethod
    def build(cls, seqlens: Sequence[int], world_size: int, *,
              granularity: int = SCALE_BLOCK_TOKENS,
              min_split_tokens: Optional[int] = None) -> "ShardPlan":
        """The load-balanced plan for documents of lengths `seqlens` on `world_size` ranks."""
        _check_count("world_size", world_size, 1)
        if granularity < 1 or granularity % SCALE_BLOCK_TOKENS != 0:
            raise ValueError(f"granularity={granularity} must be a positive multiple of "
                             f"{SCALE_BLOCK_TOKENS} (block32 scale blocks must not be cut)")
        seqlens = [int(n) for n in seqlens]
        if any(n < 0 for n in seqlens):
            raise ValueError(f"seqlens must be non-negative, got {seqlens}")
        chunks = 2 * world_size
        if min_split_tokens is None:
            min_split_tokens = chunks * max(granularity, DEFAULT_MIN_CHUNK_TOKENS)
        load = [0] * world_size
        bounds: list = [None] * len(seqlens)
        whole = []
        for d, n in enumerate(seqlens):
            if world_size > 1 and n >= min_split_tokens:
                cuts = [min(n, granularity * round(c * n / (chunks * granularity)))
                        for c in range(1, chunks)]
                bounds[d] = [0] + cuts + [n]
                for r in range(world_size):  # equal up to rounding; tracked for placement
                    load[r] += _placement_cost(n) // world_size
            else:
                whole.append(d)
        for d in sorted(whole, key=lambda d: (-seqlens[d], d)):
            r = min(range(world_size), key=lambda r: (load[r], r))
            load[r] += _placement_cost(seqlens[d])
            # Whole document = rank r's front chunk: b_c = 0 up to c = r, L after.
            bounds[d] = [0] * (r + 1) + [seqlens[d]] * (chunks - r)
        return cls(seqlens, world_size, bounds, granularity)

    @classmethod
    def from_cu_seqlens(cls, cu_seqlens: Tensor, world_size: int, **kwargs) -> "ShardPlan":
        """build() from a cu_seqlens tensor (reads it on the host: one synchronisation)."""
        if not isinstance(cu_seqlens, Tensor):
            raise TypeError(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
        if (cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1 or cu_seqlens.is_floating_point()
                or cu_seqlens.is_complex() or cu_seqlens.dtype == torch.bool):
            raise ValueError("cu_seqlens must be a 1-D integer tensor (batch + 1 cumulative "
                             f"lengths), got {cu_seqlens.dtype} {tuple(cu_seqlens.shape)}")
        cu = [int(x) for x in cu_seqlens.tolist()]
        if cu[0] != 0:
            raise ValueError(f"cu_seqlens must start at 0, got {cu[0]}")
        return cls.build([b - a for a, b in zip(cu[:-1], cu[1:])], world_size, **kwargs)

    def _check(self) -> None:
        chunks = 2 * self.world_size
        if len(self.bounds) != len(self.seqlens):
            raise ValueError("one boundary list per document is needed")
        for d, (n, b) in enumerate(zip(self.seqlens, self.bounds)):
            if len(b) != chunks + 1 or b[0] != 0 or b[-1] != n:
                raise ValueError(f"document {d}: boundaries {b} do not span [0, {n}] in "
                                 f"{chunks} chunks")
            for lo, hi in zip(b[:-1], b[1:]):
                if hi < lo:
                    raise ValueError(f"document {d}: boundaries {b} are not monotone")
                # A chunk followed by tokens must end on the grid (only the document end may not).
                if hi != n and hi % self.granularity != 0:
                    raise ValueError(f"document {d}: boundary {hi} is not a multiple of "
                                     f"{self.granularity}")

    # -- per-rank layout (host) --

    @property
    def batch(self) -> int:
        return len(self.seqlens)

    @property
    def total_tokens(self) -> int:
        return self.doc_starts[-1]

    def chunk(self, doc: int, index: int) -> tuple[int, int]:
        """Tokens [start, end) of chunk `index` within document `doc`."""
        b = self.bounds[doc]
        return b[index], b[index + 1]

    def _rank(self, rank) -> int:
        """rank as an int in [0, world_size), else ValueError (a rank outside the plan would
        index another rank's chunks)."""
        try:
            r = operator.index(rank) if not isinstance(rank, bool) else None
        except TypeError:
            r = None
        if r is None or not 0 <= r < self.world_size:
            raise ValueError(f"rank={rank!r} is not a rank of this plan: use an int in "
                             f"[0, {self.world_size})")
        return r

    def front(self, rank: int, doc: int) -> tuple[int, int]:
        return self.chunk(doc, self._rank(rank))

    def back(self, rank: int, doc: int) -> tuple[int, int]:
        return self.chunk(doc, 2 * self.world_size - 1 - self._rank(rank))

    def _chunk_len(self, rank: int, doc: int, which: str) -> int:
        # (internal, ranks already in range: no per-call check)
        index = rank if which == "front" else 2 * self.world_size - 1 - rank
        lo, hi = self.chunk(doc, index)
        return hi - lo

    def local_lengths(self, rank: int) -> list[int]:
        """Per document, the number of its tokens on `rank` (front + back)."""
        return list(self._local_lengths[self._rank(rank)])

    def cu_seqlens(self, rank: int) -> list[int]:
        cu = [0]
        for n in self.local_lengths(rank):
            cu.append(cu[-1] + n)
        return cu

    def tokens(self, rank: int) -> int:
        return sum(self.local_lengths(rank))

    def max_seqlen(self, rank: int) -> int:
        return max(self.local_lengths(rank), default=0)

    def token_index(self, rank: int) -> Tensor:
        """int64 (tokens(rank),): the global packed index of each of rank's tokens, in order."""
        parts = []
        for d in range(self.batch):
            start = self.doc_starts[d]
            for lo, hi in (self.front(rank, d), self.back(rank, d)):
                if hi > lo:
                    parts.append(torch.arange(start + lo, start + hi, dtype=torch.int64))
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)

    def position_ids(self, rank: int) -> Tensor:
        """int64 (tokens(rank),): each of rank's tokens' position inside its document (for
        rotary embeddings of the sharded tokens)."""
        parts = []
        for d in range(self.batch):
            for lo, hi in (self.front(rank, d), self.back(rank, d)):
                if hi > lo:
                    parts.append(torch.arange(lo, hi, dtype=torch.int64))
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)

    def causal_work(self, rank: int) -> int:
        """Visible (query, key) pairs whose query is on `rank` (the causal work it does)."""
        work = 0
        for d in range(self.batch):
            for lo, hi in (self.front(rank, d), self.back(rank, d)):
                # query at position p sees p + 1 keys
                work += (hi * (hi + 1) - lo * (lo + 1)) // 2
        return work

    # -- moving tensors --

    def shard(self, x: Tensor, rank: int) -> Tensor:
        """Rank's packed shard of a packed (total_tokens, ...) tensor (a copy)."""
        if not isinstance(x, Tensor) or x.dim() < 1:
            raise ValueError(f"x must be a packed (total_tokens, ...) tensor, got "
                             f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        if x.shape[0] != self.total_tokens:
            raise ValueError(f"x has {x.shape[0]} tokens but the plan covers "
                             f"{self.total_tokens}")
        return x.index_select(0, self.token_index(rank).to(x.device))

    def unshard(self, parts: Sequence[Tensor]) -> Tensor:
        """The packed (total_tokens, ...) tensor from every rank's shard (inverse of shard)."""
        if len(parts) != self.world_size:
            raise ValueError(f"{len(parts)} shards given for {self.world_size} ranks")
        for r, part in enumerate(parts):
            if part.shape[0] != self.tokens(r):
                raise ValueError(f"shard {r} has {part.shape[0]} tokens, the plan gives it "
                                 f"{self.tokens(r)}")
        ref = parts[0]
        for r, part in enumerate(parts):
            if part.shape[1:] != ref.shape[1:] or part.dtype != ref.dtype:
                raise ValueError(f"shard {r} is {part.dtype} {tuple(part.shape)}, shard 0 "
                                 f"{ref.dtype} {tuple(ref.shape)}: all but the token count "
                                 "must agree")
        out = ref.new_empty((self.total_tokens,) + tuple(ref.shape[1:]))
        for r, part in enumerate(parts):
            out.index_copy_(0, self.token_index(r).to(out.device), part)
        return out

    def local_cu_seqlens(self, rank: int, device) -> Tensor:
        return torch.tensor(self.cu_seqlens(rank), dtype=torch.int32, device=device)

    # -- ring blocks --

    def block(self, q_rank: int, k_rank: int) -> "BlockLayout":
        """The attention block of q_rank's queries against k_rank's keys (host description)."""
        return _block_layout(self, self._rank(q_rank), self._rank(k_rank))

    def device_block(self, q_rank: int, k_rank: int, device) -> "DeviceBlock":
        key = (q_rank, k_rank, str(torch.device(device)))
        if key not in self._device_cache:
            self._device_cache[key] = DeviceBlock.make(self, q_rank, k_rank, device)
        return self._device_cache[key]

    def __repr__(self) -> str:
        return (f"ShardPlan(world_size={self.world_size}, documents={self.batch}, "
                f"tokens={[self.tokens(r) for r in range(self.world_size)]})")


def _placement_cost(n: int) -> int:
    return n * (n + 1) // 2 + PLACEMENT_TOKEN_COST * n


def shard_packed_batch(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, world_size: int,
                       **plan_kwargs) -> tuple[ShardPlan, list[dict]]:
    """Shards a packed causal batch for `world_size` ranks.

    Returns the plan and, per rank, dict(q, k, v, cu_seqlens (int32, on q's device),
    max_seqlen, position_ids). Inverse: `plan.unshard([...])` for any per-token tensor."""
    plan = ShardPlan.from_cu_seqlens(cu_seqlens, world_size, **plan_kwargs)
    shards = []
    for r in range(world_size):
        shards.append(dict(q=plan.shard(q, r), k=plan.shard(k, r), v=plan.shard(v, r),
                           cu_seqlens=plan.local_cu_seqlens(r, q.device),
                           max_seqlen=plan.max_seqlen(r),
                           position_ids=plan.position_ids(r).to(q.device)))
    return plan, shards


def unshard_packed(plan: ShardPlan, parts: Sequence[Tensor]) -> Tensor:
    """The inverse of shard_packed_batch for one per-token tensor (out, dq, dk, ...)."""
    return plan.unshard(parts)


# ---- block masks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockLayout:
    """One flamia call: q_rank's local queries against k_rank's local keys.

    `q_lens`/`k_lens` are the call's documents (contiguous ranges of the two packed shards; some
    empty) and `causal` its mask. Three kinds, one per call, for every document at once:
    - diagonal (q_rank == k_rank): causal over each document's local [front, back] (equal
      lengths; a causal mask on the concatenation is exactly the true mask, because the back
      chunk comes after the front one);
    - q_rank > k_rank: every local query sees k_rank's front chunk in full and none of its back
      chunk: per document, (all local queries x front keys), then (no queries x back keys);
    - q_rank < k_rank: only the local back chunk sees anything, and it sees all of k_rank's
      keys: per document, (front queries x no keys), then (back queries x all keys).
    Non-causal documents may have unequal (or zero) lengths; rows without keys come back with
    O = 0 and LSE = -inf and merge as nothing."""
    kind: str  # "diagonal", "front_keys" (q_rank > k_rank), "back_queries" (q_rank < k_rank)
    causal: bool
    q_lens: tuple
    k_lens: tuple

    @property
    def cu_q(self) -> list[int]:
        return _cumsum(self.q_lens)

    @property
    def cu_k(self) -> list[int]:
        return _cumsum(self.k_lens)

    def visible(self) -> Tensor:
        """Dense bool (total_q, total_k) mask of the call (for tests and debugging)."""
        cu_q, cu_k = self.cu_q, self.cu_k
        mask = torch.zeros(cu_q[-1], cu_k[-1], dtype=torch.bool)
        for lq, lk, qs, ks in zip(self.q_lens, self.k_lens, cu_q, cu_k):
            if lq == 0 or lk == 0:
                continue
            block = torch.ones(lq, lk, dtype=torch.bool)
            mask[qs:qs + lq, ks:ks + lk] = torch.tril(block) if self.causal else block
        return mask


def _cumsum(lens) -> list[int]:
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    return cu


def _block_layout(plan: ShardPlan, r: int, s: int) -> BlockLayout:
    q_lens, k_lens = [], []
    if r == s:
        lens = plan.local_lengths(r)
        return BlockLayout("diagonal", True, tuple(lens), tuple(lens))
    for d in range(plan.batch):
        q_front, q_back = plan._chunk_len(r, d, "front"), plan._chunk_len(r, d, "back")
        k_front, k_back = plan._chunk_len(s, d, "front"), plan._chunk_len(s, d, "back")
        if r > s:
            q_lens += [q_front + q_back, 0]
            k_lens += [k_front, k_back]
        else:
            q_lens += [q_front, q_back]
            k_lens += [0, k_front + k_back]
    return BlockLayout("front_keys" if r > s else "back_queries", False, tuple(q_lens),
                       tuple(k_lens))


def true_visibility(plan: ShardPlan, q_rank: int, k_rank: int) -> Tensor:
    """Dense bool mask of which of k_rank's local keys each of q_rank's local queries may see
    (same document, key position <= query position): what every block must reproduce."""
    doc_of = torch.repeat_interleave(torch.arange(plan.batch), torch.tensor(plan.seqlens,
                                                                             dtype=torch.int64))
    qi, ki = plan.token_index(q_rank), plan.token_index(k_rank)
    same_doc = doc_of[qi].unsqueeze(1) == doc_of[ki].unsqueeze(0)
    return same_doc & (ki.unsqueeze(0) <= qi.unsqueeze(1))


@dataclass
class DeviceBlock:
    """A BlockLayout's device tensors and host ints, ready for the kernels (cached per plan)."""
    layout: BlockLayout
    cu_q: Tensor
    cu_k: Tensor
    max_q: int
    max_k: int
    # dQ centring correction (see _center_correction): per local query row, the index in the
    # visiting key shard of the first key of the row's call document (0 where it has no key),
    # whether it has one, and the index in the query rank's own key shard of its diagonal call
    # document's first key (the common centre).
    first_key_row: Tensor
    has_key_row: Tensor
    ref_key_row: Tensor

    @classmethod
    def make(cls, plan: ShardPlan, r: int, s: int, device) -> "DeviceBlock":
        layout = plan.block(r, s)
        q_lens = torch.tensor(layout.q_lens, dtype=torch.int64)
        k_lens = torch.tensor(layout.k_lens, dtype=torch.int64)
        cu_k = torch.tensor(layout.cu_k, dtype=torch.int64)
        first = torch.repeat_interleave(cu_k[:-1], q_lens)
        has_key = torch.repeat_interleave(k_lens > 0, q_lens)
        local = torch.tensor(plan.local_lengths(r), dtype=torch.int64)
        local_cu = torch.tensor(plan.cu_seqlens(r), dtype=torch.int64)
        ref = torch.repeat_interleave(local_cu[:-1], local)
        first = torch.where(has_key, first, torch.zeros_like(first))
        return cls(layout=layout,
                   cu_q=torch.tensor(layout.cu_q, dtype=torch.int32, device=device),
                   cu_k=torch.tensor(layout.cu_k, dtype=torch.int32, device=device),
                   max_q=max(layout.q_lens, default=0), max_k=max(layout.k_lens, default=0),
                   first_key_row=first.to(device), has_key_row=has_key.to(device),
                   ref_key_row=ref.to(device))


# ---- LSE merge and the backward's statistics ----------------------------------------------------


def merge_partial(out_acc: Tensor, lse_acc: Tensor, out_b: Tensor, lse_b: Tensor) -> None:
    """Folds a block's (out_b, lse_b) into the running (out_acc, lse_acc), in place.

    out_* (tokens, heads, dim), lse_* (heads, tokens) natural log; out_acc and lse_acc in FP32
    (or FP64). O = sum_b exp(LSE_b - LSE) O_b with LSE = log(sum_b exp(LSE_b)). Rows that no
    block has seen stay at O = 0 and LSE = -inf."""
    lse_new = torch.logaddexp(lse_acc, lse_b.to(lse_acc.dtype))
    centre = torch.where(torch.isfinite(lse_new), lse_new, torch.zeros_like(lse_new))
    w_acc = torch.exp(lse_acc - centre)  # exp(-inf) = 0 for rows with nothing yet
    w_b = torch.exp(lse_b.to(lse_acc.dtype) - centre)
    out_acc.mul_(w_acc.t().unsqueeze(2).to(out_acc.dtype))
    # out_b is read in its own dtype (exact in the accumulator's): no converted copy of it.
    out_acc.add_(out_b * w_b.t().unsqueeze(2).to(out_acc.dtype))
    lse_acc.copy_(lse_new)


def adjusted_stats(stats_b: Tensor, lse_b: Tensor, lse_global: Tensor) -> Tensor:
    """The block's {M, l_adj} for flamia's backward: l_adj = l * exp(LSE_global - LSE_b).

    The backward rebuilds P_ij = exp2(t_ij - M + 8) 2^-ev_j / l (numerics §5 step 2), which is
    exp(s_ij - LSE_b) with the block's own l. With l_adj it is exp(s_ij - LSE_global), the
    probability under the softmax over all keys of the document, which is what dS, dV and dK of
    the whole attention need. Without key smoothing LSE_b = ln l + (M - 8) ln 2, so l_adj =
    exp(LSE_global - (M - 8) ln 2); written through LSE_b it also holds with key smoothing (the
    block's LSE_b and its t both carry the block's smoothing shift). Rows without keys in the
    block keep l = 0 (the kernels skip them)."""
    m, l = stats_b[..., 0], stats_b[..., 1]
    ratio = torch.exp(lse_global - lse_b)  # >= 1; inf where the block saw nothing (l = 0 there)
    big = torch.finfo(l.dtype).max  # a block of negligible weight: P ~ 0, not inf * 0
    l_adj = torch.where(l > 0, (l * ratio).clamp(max=big), torch.zeros_like(l))
    return torch.stack((m, l_adj), dim=-1).contiguous()


# ---- block kernels ------------------------------------------------------------------------------


class FlamiaBlockKernel:
    """flamia's forward and backward ops (torch.ops.flamia.fwd / bwd) for one ring block."""

    def __init__(self, *, softmax_scale: float, scale_mode: str = "exact",
                 precision: str = "fp8", deterministic: bool = False, key_smoothing="none"):
        from . import _capi

        if scale_mode not in _capi.SCALE_MODES:
            raise ValueError(f"scale_mode={scale_mode!r}; choose one of "
                             f"{sorted(_capi.SCALE_MODES)}")
        if precision not in _capi.PRECISIONS:
            raise ValueError(f"precision={precision!r}; choose one of {sorted(_capi.PRECISIONS)}")
        self.softmax_scale = float(softmax_scale)
        self.scale_mode = scale_mode
        self.precision = precision
        self.deterministic = bool(deterministic)
        if isinstance(key_smoothing, Tensor):
            self.key_smoothing, self.vector = "vector", key_smoothing
        elif key_smoothing in ("none", "first_key"):
            self.key_smoothing, self.vector = key_smoothing, None
        else:
            raise ValueError(f"key_smoothing={key_smoothing!r}: 'none', 'first_key' or a "
                             "(heads_kv, head_dim) float32 tensor")
        # Both backward precisions compute dQ against k - k_first(document) (numerics §5 steps 7
        # and 10: K̂c, or a BF16 copy), exact only when a row's dS sums to zero, which a block's
        # does not (see _center_correction).
        self.centers_dq_keys = True

    def forward(self, q, k, v, cu_q, cu_k, max_q, max_k, causal):
        out, lse, stats, _ = torch.ops.flamia.fwd(q, k, v, cu_q, cu_k, max_q, max_k,
                                                  self.softmax_scale, causal, self.scale_mode,
                                                  self.key_smoothing, self.vector, self.precision,
                                                  self.deterministic)
        return out, lse, stats

    def backward(self, dout, q, k, v, out, lse, stats, cu_q, cu_k, max_q, max_k, causal):
        return torch.ops.flamia.bwd(dout, q, k, v, out, lse, stats, cu_q, cu_k, max_q, max_k,
                                    self.softmax_scale, causal, self.scale_mode,
                                    self.key_smoothing, self.vector, self.precision,
                                    self.deterministic)


class TorchBlockKernel:
    """A pure-PyTorch block kernel with flamia's conventions and no quantization (any device).

    Forward: t = softmax_scale * log2(e) * q.(k - m), M = ceil(max t), l = sum exp2(t - M + 8),
    O = sum exp2(t - M + 8) v / l, LSE = ln l + (M - 8) ln 2 + softmax_scale * q.m (m: 0 or the
    call document's first key); causal documents must have equal lengths, as flamia's. Backward
    from the given {M, l} and O: P = exp2(t - M + 8) / l, D = dO.O, dS = P (dP - D),
    dQ = scale * sum dS (k - k_first) when `centered_dq` (flamia's backward, both precisions)
    else scale * sum dS k,
    dK = scale * sum dS q, dV = sum P dO. Arithmetic in float64; outputs in the input dtype and
    statistics in float64 for float64 inputs (FP32 otherwise), so float64 tests are exact to
    rounding."""

    def __init__(self, softmax_scale: float, *, key_smoothing: str = "none",
                 centered_dq: bool = True):
        if key_smoothing not in ("none", "first_key"):
            raise ValueError(f"key_smoothing={key_smoothing!r}: 'none' or 'first_key'")
        self.softmax_scale = float(softmax_scale)
        self.key_smoothing = key_smoothing
        self.centers_dq_keys = bool(centered_dq)

    @staticmethod
    def _documents(cu_q, cu_k, causal):
        cq, ck = cu_q.tolist(), cu_k.tolist()
        docs = list(zip(cq[:-1], cq[1:], ck[:-1], ck[1:]))
        for qs, qe, ks, ke in docs:
            if causal and qe - qs != ke - ks:
                raise ValueError("causal documents must have equal query and key lengths "
                                 f"(got {qe - qs} and {ke - ks}), as in flamia")
        return docs

    def _scores(self, qd, kd, causal):
        """t (heads, lq, lk) in log2 units, the smoothing shift (heads, lq) and the mask."""
        m = kd[:, :1, :] if self.key_smoothing == "first_key" else torch.zeros_like(kd[:, :1, :])
        t = self.softmax_scale * LOG2E * (qd @ (kd - m).transpose(1, 2))
        lq, lk = t.shape[1], t.shape[2]
        mask = torch.ones(lq, lk, dtype=torch.bool, device=t.device)
        if causal:
            mask = torch.tril(mask)
        shift = self.softmax_scale * (qd * m).sum(dim=2)
        return t.masked_fill(~mask, -math.inf), shift

    @staticmethod
    def _heads(x, group, s, e):
        return x[s:e].double().repeat_interleave(group, dim=1).transpose(0, 1)

    def forward(self, q, k, v, cu_q, cu_k, max_q, max_k, causal):
        heads_q, group = q.shape[1], q.shape[1] // k.shape[1]
        stat_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
        lse = torch.full((heads_q, q.shape[0]), -math.inf, dtype=torch.float64, device=q.device)
        stats = torch.zeros((heads_q, q.shape[0], 2), dtype=torch.float64, device=q.device)
        for qs, qe, ks, ke in self._documents(cu_q, cu_k, causal):
            if qe == qs or ke == ks:
                continue
            qd = q[qs:qe].double().transpose(0, 1)
            kd, vd = self._heads(k, group, ks, ke), self._heads(v, group, ks, ke)
            t, shift = self._scores(qd, kd, causal)
            row_max = torch.ceil(t.amax(dim=2, keepdim=True))
            p = torch.exp2(t - row_max + P_OFFSET)
            l = p.sum(dim=2, keepdim=True)
            out[qs:qe] = ((p @ vd) / l).transpose(0, 1)
            lse[:, qs:qe] = (torch.log(l) + (row_max - P_OFFSET) * LN2).squeeze(2) + shift
            stats[:, qs:qe, 0] = row_max.squeeze(2)
            stats[:, qs:qe, 1] = l.squeeze(2)
        return out.to(q.dtype), lse.to(stat_dtype), stats.to(stat_dtype)

    def backward(self, dout, q, k, v, out, lse, stats, cu_q, cu_k, max_q, max_k, causal):
        heads_q, heads_kv = q.shape[1], k.shape[1]
        group = heads_q // heads_kv
        dq = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
        dk = torch.zeros(k.shape, dtype=torch.float64, device=q.device)
        dv = torch.zeros(v.shape, dtype=torch.float64, device=q.device)
        delta = (dout.double() * out.double()).sum(dim=2).t()  # D (heads, tokens)
        for qs, qe, ks, ke in self._documents(cu_q, cu_k, causal):
            if qe == qs or ke == ks:
                continue
            qd = q[qs:qe].double().transpose(0, 1)
            kd, vd = self._heads(k, group, ks, ke), self._heads(v, group, ks, ke)
            dod = dout[qs:qe].double().transpose(0, 1)
            t, _ = self._scores(qd, kd, causal)
            row_max = stats[:, qs:qe, 0].double().unsqueeze(2)
            l = stats[:, qs:qe, 1].double().unsqueeze(2)
            inv_l = torch.where(l > 0, 1.0 / torch.where(l > 0, l, torch.ones_like(l)), 0.0)
            p = torch.exp2(t - row_max + P_OFFSET) * inv_l
            ds = p * (dod @ vd.transpose(1, 2) - delta[:, qs:qe].unsqueeze(2))
            centre = kd[:, :1, :] if self.centers_dq_keys else torch.zeros_like(kd[:, :1, :])
            dq[qs:qe] = (self.softmax_scale * ds @ (kd - centre)).transpose(0, 1)
            dk_h = self.softmax_scale * ds.transpose(1, 2) @ qd  # (heads_q, lk, dim)
            dv_h = p.transpose(1, 2) @ dod
            shape = (heads_kv, group) + tuple(dk_h.shape[1:])
            dk[ks:ke] += dk_h.reshape(shape).sum(dim=1).transpose(0, 1)
            dv[ks:ke] += dv_h.reshape(shape).sum(dim=1).transpose(0, 1)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


# ---- the per-rank ring programs -----------------------------------------------------------------
#
# Each rank's forward and backward are generators that yield communication requests: _Post
# (send `send` to the next rank, receive `recv` from the previous one; answered with a handle)
# and _Wait (block until a posted exchange is complete). A driver performs them: with
# torch.distributed isend/irecv on a real ring (_drive_distributed), or, for all ranks of one
# process in lockstep, as copies (_drive_lockstep). Both run exactly the same per-rank code.


@dataclass
class _Post:
    send: Tensor
    recv: Tensor


@dataclass
class _Wait:
    handle: object


@dataclass
class _Rank:
    plan: ShardPlan
    rank: int
    kernel: object
    keep_block_outputs: bool = False  # keep off-diagonal blocks' (O_b, LSE_b) for the backward

    @property
    def world_size(self) -> int:
        return self.plan.world_size

    def source(self, step: int) -> int:
        """Whose keys this rank holds at ring step `step`."""
        return (self.rank - step) % self.world_size


def _kv_buffer(tokens: int, like: Tensor, dtype=None) -> Tensor:
    """An uninitialised (2, tokens, heads_kv, head_dim) buffer shaped like the packed `like`.
    At least one token, so that no rank ever sends or receives a zero-sized message."""
    return like.new_empty((KV_PARTS, max(tokens, 1)) + tuple(like.shape[2:]),
                          dtype=dtype or like.dtype)


def _pack_kv(k: Tensor, v: Tensor) -> Tensor:
    buf = k.new_empty((KV_PARTS, max(k.shape[0], 1)) + tuple(k.shape[1:]))
    buf[0, :k.shape[0]] = k
    buf[1, :v.shape[0]] = v
    return buf


def _unpack(buf: Tensor, tokens: int) -> tuple[Tensor, Tensor]:
    return buf[0, :tokens], buf[1, :tokens]


def _stat_dtype(x: Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _forward_program(rt: _Rank, q: Tensor, kv: Tensor) -> Generator:
    """Returns (out, lse, stats, kept): out like q, lse (heads_q, tokens), the backward's per-step
    statistics (world_size, heads_q, tokens, 2) = {M, l_adj} of each ring step's block, and with
    rt.keep_block_outputs each step's (O_b, LSE_b) (None for the diagonal step 0), else None."""
    plan, r, world = rt.plan, rt.rank, rt.world_size
    acc_dtype = _stat_dtype(q)
    out_acc = lse_acc = None
    block_stats = []
    kept = [None] if rt.keep_block_outputs else None
    current = kv
    for step in range(world):
        s = rt.source(step)
        if step + 1 < world:  # the next step's keys travel while this block computes
            incoming = _kv_buffer(plan.tokens(rt.source(step + 1)), kv)
            handle = yield _Post(current, incoming)
        k_s, v_s = _unpack(current, plan.tokens(s))
        blk = plan.device_block(r, s, q.device)
        with torch.no_grad():
            out_b, lse_b, stats_b = rt.kernel.forward(q, k_s, v_s, blk.cu_q, blk.cu_k, blk.max_q,
                                                      blk.max_k, blk.layout.causal)
        if step == 0:
            # The diagonal block starts the accumulator: exactly what merge_partial makes of it
            # (weights 0 and 1), without an O-sized FP32 zero fill and rescale; one block is the
            # result as it is.
            out_acc = out_b if world == 1 else out_b.to(acc_dtype, copy=True)
            lse_acc = lse_b.to(acc_dtype, copy=True)
        else:
            merge_partial(out_acc, lse_acc, out_b, lse_b)
            if kept is not None:
                kept.append((out_b, lse_b))
        block_stats.append((stats_b, lse_b))
        if step + 1 < world:
            yield _Wait(handle)
            current = incoming
    stats = torch.stack([adjusted_stats(st.to(acc_dtype), lb.to(acc_dtype), lse_acc)
                         for st, lb in block_stats])
    return out_acc.to(q.dtype), lse_acc, stats, kept


def _center_correction(rt: _Rank, blk: DeviceBlock, q, k_s, v_s, k_own, dout_acc, lse, delta,
                       dq_acc: Tensor, block_output=None) -> None:
    """Adds to dq_acc (FP32, in place) what flamia's FP8 dQ of one off-diagonal block misses.

    The FP8 backward computes dQ_i = scale * sum_j dS_ij (k_j - k_first(document)) over the
    call's document (numerics §5 step 7): equal to scale * sum_j dS_ij k_j only because a full
    row of dS sums to zero. A block's row sums to rs_b = sum_{j in b} dS_ij = w_b (dO.O_b - D)
    (w_b = exp(LSE_b - LSE) its share of the softmax, O_b its own output), not to zero, so the
    block's dQ is short by scale * rs_b * k_first(b). Adding scale * rs_b * (k_first(b) - c)
    makes every block centred on the same c per query row (the first key of the row's diagonal
    block, whose own dQ needs nothing), and the sum over blocks is then the single-GPU result
    (sum_b rs_b = 0). O_b and LSE_b come from `block_output`, the forward's own (kept with
    keep_block_outputs: O-sized memory per off-diagonal step), or are recomputed with one forward
    of the block (bit for bit the same: the forward is deterministic)."""
    if block_output is not None:
        out_b, lse_b = block_output
    else:
        with torch.no_grad():
            out_b, lse_b, _ = rt.kernel.forward(q, k_s, v_s, blk.cu_q, blk.cu_k, blk.max_q,
                                                blk.max_k, blk.layout.causal)
    acc = dq_acc.dtype
    tokens, heads_q, dim = q.shape
    heads_kv = k_s.shape[1]
    centre = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    weight = torch.exp(lse_b.to(acc) - centre)  # 0 for rows without keys in the block
    row_sum = weight * ((dout_acc * out_b).sum(dim=2).t() - delta)  # (heads, tokens)
    shift = k_s.index_select(0, blk.first_key_row).to(acc) - k_own.index_select(
        0, blk.ref_key_row).to(acc)  # (tokens, heads_kv, dim)
    shift.mul_(blk.has_key_row.to(acc).view(-1, 1, 1))
    # Query head h uses KV head h // group: view dQ as (tokens, heads_kv, group, dim).
    group = heads_q // heads_kv
    dq_acc.view(tokens, heads_kv, group, dim).addcmul_(
        row_sum.t().reshape(tokens, heads_kv, group, 1), shift.unsqueeze(2),
        value=rt.kernel.softmax_scale)


def _backward_program(rt: _Rank, q: Tensor, kv: Tensor, out: Tensor, dout: Tensor, lse: Tensor,
                      stats: Tensor, kept=None) -> Generator:
    """Returns (dq, dk, dv) of this rank's shard. K/V travel as in the forward; each block's
    dK/dV are added to an accumulator that follows the keys around the ring and reaches their
    owner after the last step."""
    plan, r, world = rt.plan, rt.rank, rt.world_size
    acc_dtype = _stat_dtype(q)
    tokens_own = plan.tokens(r)
    k_own = kv[0, :tokens_own]
    dq_acc = None
    # For the dQ correction of the off-diagonal blocks only: dO in the accumulators' dtype,
    # converted once (exact from BF16; products read the BF16 tensors as they are), and
    # D_i = dO.O (global).
    dout_acc = dout.to(acc_dtype) if world > 1 else None
    delta = (dout_acc * out).sum(dim=2).t() if world > 1 else None
    current = kv
    d_kv_in = handle_dkv = None
    for step in range(world):
        s = rt.source(step)
        if step + 1 < world:
            incoming = _kv_buffer(plan.tokens(rt.source(step + 1)), kv)
            handle_kv = yield _Post(current, incoming)
        tokens_s = plan.tokens(s)
        k_s, v_s = _unpack(current, tokens_s)
        blk = plan.device_block(r, s, q.device)
        with torch.no_grad():
            dq_b, dk_b, dv_b = rt.kernel.backward(dout, q, k_s, v_s, out, lse, stats[step],
                                                  blk.cu_q, blk.cu_k, blk.max_q, blk.max_k,
                                                  blk.layout.causal)
            if step == 0:  # the diagonal block (s = r) starts the accumulator
                dq_acc = dq_b if world == 1 else dq_b.to(acc_dtype, copy=True)
            else:
                dq_acc.add_(dq_b)
            if rt.kernel.centers_dq_keys and s != r and q.shape[0] > 0 and tokens_s > 0:
                _center_correction(rt, blk, q, k_s, v_s, k_own, dout_acc, lse, delta, dq_acc,
                                   None if kept is None else kept[step])
        if world == 1:  # the one block's gradients are the result
            return dq_acc.to(q.dtype), dk_b.to(kv.dtype), dv_b.to(kv.dtype)
        d_kv = _kv_buffer(tokens_s, kv, dtype=acc_dtype)
        if tokens_s == 0:
            d_kv.zero_()  # the one padding token (no rank sends a zero-sized message)
        d_kv[0, :tokens_s] = dk_b
        d_kv[1, :tokens_s] = dv_b
        if step > 0:  # the gradients of these keys from the ranks before this one
            yield _Wait(handle_dkv)
            d_kv += d_kv_in
        if step + 1 < world:
            yield _Wait(handle_kv)
            current = incoming
        if world > 1:
            # To the next rank, which holds these keys at the next step (after the last step:
            # their owner). The receive is for the keys this rank holds next.
            d_kv_in = _kv_buffer(plan.tokens(rt.source(step + 1)), kv, dtype=acc_dtype)
            handle_dkv = yield _Post(d_kv, d_kv_in)
    if world > 1:
        yield _Wait(handle_dkv)
        d_kv = d_kv_in
    dk, dv = _unpack(d_kv, tokens_own)
    return dq_acc.to(q.dtype), dk.to(kv.dtype), dv.to(kv.dtype)


# ---- drivers ------------------------------------------------------------------------------------


def _drive_distributed(program: Generator, group, rank: int, world: int):
    import torch.distributed as dist

    def global_rank(r):
        return r if group is None else dist.get_global_rank(group, r)

    send_to, recv_from = global_rank((rank + 1) % world), global_rank((rank - 1) % world)
    value = None
    while True:
        try:
            request = program.send(value)
        except StopIteration as stop:
            return stop.value
        if isinstance(request, _Post):
            ops = [dist.P2POp(dist.isend, request.send, send_to, group),
                   dist.P2POp(dist.irecv, request.recv, recv_from, group)]
            value = dist.batch_isend_irecv(ops)
        else:
            for work in request.handle:
                work.wait()  # on NCCL: the current stream waits; the host does not
            value = None


def _drive_lockstep(programs: list) -> list:
    """Runs every rank's program in one process; exchange n completes (recv of rank r <- send of
    rank r - 1) once every rank has posted its n-th exchange."""
    world = len(programs)
    values, results = [None] * world, [None] * world
    done, blocked = [False] * world, [None] * world
    posts: list = [[] for _ in range(world)]
    completed: set = set()
    while not all(done):
        progress = False
        for r in range(world):
            if done[r] or (blocked[r] is not None and blocked[r] not in completed):
                continue
            blocked[r] = None
            while True:
                try:
                    request = programs[r].send(values[r])
                except StopIteration as stop:
                    results[r], done[r] = stop.value, True
                    progress = True
                    break
                progress = True
                if isinstance(request, _Post):
                    values[r] = len(posts[r])
                    posts[r].append(request)
                    continue
                values[r] = None
                if request.handle not in completed:
                    blocked[r] = request.handle
                    break
        for n in range(min(len(p) for p in posts)):
            if n in completed:
                continue
            for r in range(world):
                sent, recv = posts[(r - 1) % world][n].send, posts[r][n].recv
                if sent.shape != recv.shape or sent.dtype != recv.dtype:
                    raise RuntimeError(f"ring exchange {n}: rank {(r - 1) % world} sends "
                                       f"{tuple(sent.shape)} {sent.dtype}, rank {r} expects "
                                       f"{tuple(recv.shape)} {recv.dtype}")
            for r in range(world):
                posts[r][n].recv.copy_(posts[(r - 1) % world][n].send)
            completed.add(n)
            progress = True
        if not progress:
            raise RuntimeError("ring programs deadlocked (mismatched exchanges)")
    return results


# ---- public entry points ------------------------------------------------------------------------


def _default_kernel(q: Tensor, softmax_scale, scale_mode, precision, deterministic,
                    key_smoothing) -> FlamiaBlockKernel:
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[2])
    return FlamiaBlockKernel(softmax_scale=softmax_scale, scale_mode=scale_mode,
                             precision=precision, deterministic=deterministic,
                             key_smoothing=key_smoothing)


def _block_kernel(kernel, q: Tensor, softmax_scale, scale_mode, precision, deterministic,
                  key_smoothing):
    """`kernel`, or flamia's built from the options; options given with a kernel would be
    ignored, so they are an error."""
    if kernel is None:
        return _default_kernel(q, softmax_scale, scale_mode, precision, deterministic,
                               key_smoothing)
    given = [name for name, value, default in (
        ("softmax_scale", softmax_scale, None), ("scale_mode", scale_mode, "exact"),
        ("precision", precision, "fp8"), ("deterministic", deterministic, False),
        ("key_smoothing", key_smoothing, "none")) if isinstance(value, Tensor) or value != default]
    if given:
        raise ValueError(f"{', '.join(given)} given together with kernel=, which would ignore "
                         "them: pass them to the kernel instead (e.g. "
                         "FlamiaBlockKernel(softmax_scale=..., deterministic=...))")
    return kernel


def _check_shard(plan: ShardPlan, rank: int, q: Tensor, k: Tensor, v: Tensor,
                 kernel=None) -> None:
    """The shard's shapes against the plan (before anything reads them), then, for flamia's
    kernel, flamia's own argument checks."""
    tokens = plan.tokens(rank)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(f"{name} must be (tokens, heads, head_dim), got {tuple(t.shape)}")
        if t.shape[0] != tokens:
            raise ValueError(f"{name} has {t.shape[0]} tokens but the plan gives rank {rank} "
                             f"{tokens}; shard it with plan.shard({name}, {rank})")
        if t.shape[1] < 1:
            raise ValueError(f"{name} has no heads (shape {tuple(t.shape)})")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if k.dtype != v.dtype:
        raise TypeError(f"k is {k.dtype} but v is {v.dtype}; they travel in one buffer and "
                        "must have the same dtype")
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"q has head_dim {q.shape[2]} but k has {k.shape[2]}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"heads_q={q.shape[1]} is not a multiple of heads_kv={k.shape[1]}")
    if isinstance(kernel, FlamiaBlockKernel):
        from . import _checks

        if kernel.scale_mode == "block32" and plan.granularity % SCALE_BLOCK_TOKENS != 0:
            raise ValueError("block32 needs a plan whose granularity is a multiple of 32")
        cu = plan.device_block(rank, rank, q.device).cu_q  # the local cu_seqlens (cached)
        max_len = max(plan.max_seqlen(rank), 1 if tokens else 0)
        _checks.check_varlen(q, k, v, cu, cu, max_len, max_len,
                             softmax_scale=kernel.softmax_scale, causal=True,
                             scale_mode=kernel.scale_mode, precision=kernel.precision,
                             deterministic=kernel.deterministic,
                             key_smoothing=kernel.vector if kernel.vector is not None
                             else kernel.key_smoothing)


class _RingAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, rt, group):
        kv = _pack_kv(k, v)
        out, lse, stats, kept = _drive_distributed(_forward_program(rt, q, kv), group, rt.rank,
                                                   rt.world_size)
        ctx.save_for_backward(q, k, v, out, lse, stats)
        ctx.rt, ctx.group, ctx.kept = rt, group, kept
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, stats = ctx.saved_tensors
        rt = ctx.rt
        dout = torch.zeros_like(out) if dout is None else dout.contiguous()
        dq, dk, dv = _drive_distributed(
            _backward_program(rt, q, _pack_kv(k, v), out, dout, lse, stats, ctx.kept), ctx.group,
            rt.rank, rt.world_size)
        ctx.kept = None
        return dq, dk, dv, None, None


def ring_attention(q: Tensor, k: Tensor, v: Tensor, plan: ShardPlan, *, group=None,
                   softmax_scale=None, scale_mode: str = "exact", precision: str = "fp8",
                   deterministic: bool = False, key_smoothing="none", return_lse: bool = False,
                   kernel=None, keep_block_outputs: bool = False):
    """Causal attention of this rank's shard (plan.shard(x, rank)) over the whole packed batch,
    across the ranks of `group` (default: the world) by ring exchange. Differentiable in q, k, v.

    Every rank must call it with the same plan, in the same order (the calls exchange tensors
    with the neighbours). Arguments as in flamia.attn_varlen_func; `kernel` replaces flamia's
    kernels (e.g. TorchBlockKernel for CPU runs over gloo). keep_block_outputs keeps each
    off-diagonal ring step's block output (W - 1 tensors like q per rank, until the backward) so
    that the backward's dQ correction need not run that block's forward again (docs/
    context-parallel.md §4.1; the results are bit for bit the same). Returns this rank's out (like
    q) or (out, lse) with lse FP32 (heads_q, tokens) in natural log (no gradient)."""
    import torch.distributed as dist

    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if plan.world_size != world:
        raise ValueError(f"the plan is for {plan.world_size} ranks, the group has {world}")
    _check_shard(plan, rank, q, k, v)  # before the default kernel reads q's head_dim
    kernel = _block_kernel(kernel, q, softmax_scale, scale_mode, precision, deterministic,
                           key_smoothing)
    _check_shard(plan, rank, q, k, v, kernel)
    out, lse = _RingAttentionFunction.apply(q, k, v,
                                            _Rank(plan, rank, kernel, keep_block_outputs), group)
    return (out, lse) if return_lse else out


def simulate_ring_attention(plan: ShardPlan, qs: Sequence[Tensor], ks: Sequence[Tensor],
                            vs: Sequence[Tensor], douts: Optional[Sequence[Tensor]] = None, *,
                            kernel=None, softmax_scale=None, scale_mode: str = "exact",
                            precision: str = "fp8", deterministic: bool = False,
                            key_smoothing="none", keep_block_outputs: bool = False) -> dict:
    """Runs ring attention for all plan.world_size ranks in this process: every rank's forward
    (and, with `douts`, backward) program, ring step by ring step, the exchanges done as copies.
    Inputs and results are per-rank lists of shards. Returns dict(out, lse[, dq, dk, dv]).
    Not differentiable: the backward is run explicitly from `douts`."""
    world = plan.world_size
    if not (len(qs) == len(ks) == len(vs) == world):
        raise ValueError(f"one shard per rank is needed ({world} ranks)")
    for r in range(world):  # before the default kernel reads q's head_dim
        _check_shard(plan, r, qs[r], ks[r], vs[r])
    if douts is not None:
        if len(douts) != world:
            raise ValueError(f"douts: one shard per rank is needed ({world} ranks), got "
                             f"{len(douts)}")
        for r, dout in enumerate(douts):
            if not isinstance(dout, Tensor) or dout.shape != qs[r].shape:
                got = tuple(dout.shape) if isinstance(dout, Tensor) else type(dout).__name__
                raise ValueError(f"douts[{r}] must be shaped like qs[{r}] "
                                 f"{tuple(qs[r].shape)}, got {got}")
    kernel = _block_kernel(kernel, qs[0], softmax_scale, scale_mode, precision, deterministic,
                           key_smoothing)
    ranks = [_Rank(plan, r, kernel, keep_block_outputs) for r in range(world)]
    for r in range(world):
        _check_shard(plan, r, qs[r], ks[r], vs[r], kernel)
    kvs = [_pack_kv(ks[r].detach(), vs[r].detach()) for r in range(world)]
    qs = [q.detach() for q in qs]
    fwd = _drive_lockstep([_forward_program(ranks[r], qs[r], kvs[r]) for r in range(world)])
    result = dict(out=[f[0] for f in fwd], lse=[f[1] for f in fwd])
    if douts is None:
        return result
    bwd = _drive_lockstep([
        _backward_program(ranks[r], qs[r], kvs[r], fwd[r][0], douts[r].contiguous(),
                          fwd[r][1], fwd[r][2], fwd[r][3]) for r in range(world)])
    result.update(dq=[b[0] for b in bwd], dk=[b[1] for b in bwd], dv=[b[2] for b in bwd])
    return result
