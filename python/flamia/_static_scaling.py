"""Delayed scaling for scale_mode "static": exponents from earlier calls' K and V amax."""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import _check_count
from ._interface import E4M3_MAX, key_value_amax, static_exponents


def keys_as_quantized(k: Tensor, cu_seqlens_k: Tensor, key_smoothing: str,
                      vector: Tensor | None) -> Tensor:
    """k - m, what the kernels quantize into K̂ (numerics §3): m is each document's first key
    ("first_key"), the (heads_kv, head_dim) vector ("vector"), or 0 ("none": k itself). One
    pass over k; no host synchronisation."""
    if key_smoothing == "none":
        return k
    keys = k.detach().float()
    if key_smoothing == "vector":
        return keys - vector.float()[None]
    lengths = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    first = torch.repeat_interleave(cu_seqlens_k[:-1].long(), lengths, output_size=k.shape[0])
    return keys - keys[first]


class StaticScaleHistory:
    """Delayed scaling for scale_mode "static", one object per attention layer:

        scales = flamia.StaticScaleHistory(margin=1, history=16)   # in the layer's __init__
        e = scales.exponents(k, v)                                  # in its forward
        out = flamia.attn_varlen_func(..., scale_mode="static", static_exponents=e)

    exponents(k, v) returns flamia.static_exponents of the K and V amax per KV head over the
    last `history` recorded calls (plus `margin` binades of headroom), then records this call's
    amax. Exponents that depend on no token of the current call keep the forward exactly causal;
    the first call, with nothing recorded, takes its own amax (as a bound must come from
    somewhere). Elements that outgrow the exponents saturate at 448 * 2^e: `saturated_heads`,
    a (2, heads_kv) bool tensor, says which of the last call's K and V heads did (from the amax
    the call computes anyway), and with count_saturated=True `saturated` holds how many
    elements (one more pass over K and V). Both are device tensors (reading them synchronises).
    A recomputed forward (activation checkpointing) should pass record=False: it gets the
    exponents the last recording call got (the forward it recomputes) and records nothing.
    Everything stays on the tensors' device; no host synchronisation. The amax (and the count)
    read K and V once more outside flamia's kernels.

    Or pass the object itself, attn_varlen_func(..., scale_mode="static", static_exponents=
    scales): the call takes the same exponents and records the amax its own quantize pass
    measures (flamia_forward_args.kv_amax: of the keys as quantized, k - m under key smoothing),
    so K and V are read once more only at the first call (which has nothing recorded) and for
    count_saturated. The first call's bound and the count are of the keys as quantized (rotated
    by qk_rotation, minus the key smoothing's m: keys_as_quantized), like the recorded amax. A
    call made during a backward pass (activation checkpointing's recomputed forward) takes the
    last call's exponents and records nothing. A failed call (its amax NaN,
    flamia_check_device_status reports it) records 0. With exponents(k, v) under key smoothing,
    pass the keys as quantized as k."""

    def __init__(self, margin: int = 1, history: int = 16, count_saturated: bool = False):
        self.margin = _check_count("margin", margin, 0)
        self.history = _check_count("history", history, 1)
        self.count_saturated = count_saturated
        # (history, 2, heads_kv) FP32: the recorded calls' amax, newest last, zeros before the
        # first (an amax is >= 0, so they bound nothing); None until a call records. A tensor of
        # fixed shape, not a growing list: torch.compile guards on neither its length nor a
        # counter, so the calls after the second compile nothing new.
        self._window: Tensor | None = None
        self._recorded: Tensor | None = None  # int64 count of recorded calls (on the device)
        self._last_exponents: Tensor | None = None  # of the last recording call
        self.saturated_heads: Tensor | None = None
        self.saturated: Tensor | None = None  # with count_saturated

    def _forward_exponents(self, keys, v: Tensor, recomputing: bool = False) -> Tensor:
        """The exponents of a forward that will record its own amax (_record_forward); a
        recomputed forward's are those of the forward it recomputes. `keys`: the keys as the
        kernels quantize them (keys_as_quantized), or a function giving them, called only when
        they are read (the first call, count_saturated), and then once."""
        if recomputing and self._last_exponents is not None:
            return self._last_exponents
        if not isinstance(v, Tensor) or v.dim() != 3:
            raise ValueError("v must be a (tokens, heads_kv, head_dim) tensor")
        self._check_heads(v.shape[1])
        if callable(keys) and (self._window is None or self.count_saturated):
            keys = keys()
        e = self._bound_exponents(lambda: key_value_amax(keys, v))
        if self.count_saturated:
            self._count(keys, v, e)
        return e

    def _record_forward(self, amax: Tensor, e: Tensor) -> None:
        """Records a forward's kv_amax (FP32 (2, heads_kv)) taken under the exponents `e`."""
        amax = torch.nan_to_num(amax, nan=0.0)  # a failed call's (poisoned) amax bounds nothing
        self.saturated_heads = amax > self._limit(e)
        self._record(amax, e)

    def _check_heads(self, heads_kv: int) -> None:
        if self._window is not None and self._window.shape[2] != heads_kv:
            raise ValueError(f"k and v have {heads_kv} KV heads; the recorded calls had "
                             f"{self._window.shape[2]}")

    def _bound_exponents(self, first_amax) -> Tensor:
        """The exponents of the recorded calls' amax; first_amax() when none is recorded."""
        bound = self._window.amax(dim=0) if self._window is not None else first_amax()
        return static_exponents(bound[0], bound[1], margin=self.margin)

    def _record(self, amax: Tensor, e: Tensor) -> None:
        amax = amax.detach().float()
        if self._window is None:
            self._window = amax.new_zeros((self.history,) + tuple(amax.shape))
            self._recorded = torch.zeros((), dtype=torch.int64, device=amax.device)
        self._window = torch.cat([self._window[1:], amax[None]])
        self._recorded = self._recorded + 1
        self._last_exponents = e

    def recorded_amax(self) -> list[Tensor]:
        """The recorded calls' (2, heads_kv) amax still in the window, oldest first (reads the
        count: synchronises; for tests and inspection)."""
        if self._window is None:
            return []
        kept = min(int(self._recorded), self.history)
        return list(self._window[self.history - kept:].unbind(0))

    @staticmethod
    def _limit(e: Tensor) -> Tensor:
        """(2, heads_kv): K's and V's largest finite E4M3 value under the exponents e."""
        return E4M3_MAX * torch.exp2(e.float())

    def _count(self, k: Tensor, v: Tensor, e: Tensor) -> None:
        limit = self._limit(e)
        self.saturated = sum((t.detach().abs() > limit[i, None, :, None]).sum()
                             for i, t in enumerate((k, v)))

    def exponents(self, k: Tensor, v: Tensor, record: bool = True) -> Tensor:
        for name, t in (("k", k), ("v", v)):
            if not isinstance(t, Tensor) or t.dim() != 3:
                raise ValueError(f"{name} must be a (tokens, heads_kv, head_dim) tensor")
        current = key_value_amax(k, v)
        self._check_heads(current.shape[1])
        if not record and self._last_exponents is not None:  # a recomputed forward
            e = self._last_exponents
        else:
            e = self._bound_exponents(lambda: current)
        self.saturated_heads = current > self._limit(e)
        if self.count_saturated:
            self._count(k, v, e)
        if record:
            self._record(current, e)
        return e
