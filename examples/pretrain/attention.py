"""Attention backends for the pretraining example, and a timer for the attention share of a step.

Backends (all causal over packed documents, (tokens, heads, head_dim) BF16 inputs, GQA):
- bf16: torch.nn.attention.varlen.varlen_attn (FlashAttention kernels shipped in PyTorch) with
  window_size=(-1, 0); the fastest BF16 varlen attention available on the GPU machine without
  extra packages. Falls back to `sdpa` when this torch has no varlen_attn.
- sdpa: F.scaled_dot_product_attention per document (slow; for CPU smoke tests).
- flamia_exact / flamia_block32: flamia.attn_varlen_func with that scale mode.
- flamia_static: scale_mode "static" with delayed scaling (DelayedStaticScales): each layer's K
  and V exponents from the largest amax its K and V had over the previous steps, plus a margin;
  no scale depends on a token of the step (the first step's come from its own K and V).
  Held-out evaluation takes the last training call's exponents and records nothing.
- fp8fwd_bf16bwd / bf16fwd_fp8bwd: the forward value of one (flamia exact / bf16) with the
  gradient of the other (`straight_through`): which half of FP8 attention costs the loss.
  Each computes both forwards, so their timings mean nothing.
- bf16_fp8qk / bf16_fp8qkv: bf16 on q, k (and v) rounded to E4M3 at flamia's per-token scales
  (fp8_emulation.fake_quantize_per_token, straight-through gradient): FP8's operand error alone,
  with BF16 probabilities and gradients — does Q·Kᵀ's quantization cost the loss?
- bf16_unsafe_fp8qkv: bf16 on q, k, v rounded to E4M3 at the causality audit's `unsafe` scales
  (fp8_emulation.fake_quantize_unsafe_blocks: OCP scales over global 32-token blocks, which
  cross documents and read later tokens): does a model learn to exploit such a leak? Train with
  it and evaluate the held-out loss with a leak-free backend too (train.py --heldout-attention
  bf16_fp8qkv): a model that uses the leak does worse without it.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

# Straight-through pairs: backend name -> (backend giving the value, backend giving the gradient)
MIXED = {"fp8fwd_bf16bwd": ("flamia_exact", "bf16"), "bf16fwd_fp8bwd": ("bf16", "flamia_exact")}
# bf16 on fake-quantized operands: backend name -> (the operands rounded to E4M3, their scales)
FAKE_QUANTIZED = {"bf16_fp8qk": (("q", "k"), "per_token"),
                  "bf16_fp8qkv": (("q", "k", "v"), "per_token"),
                  "bf16_unsafe_fp8qkv": (("q", "k", "v"), "unsafe_blocks")}
# their scales -> (the fp8_emulation function that rounds an operand, a description)
FAKE_QUANTIZED_SCALES = {
    "per_token": ("fake_quantize_per_token", "per-token scales"),
    "unsafe_blocks": ("fake_quantize_unsafe_blocks",
                      "the audit's unsafe scales (OCP rule, global 32-token blocks across "
                      "documents)")}
BACKENDS = ("bf16", "sdpa", "flamia_exact", "flamia_block32", "flamia_static", *MIXED,
            *FAKE_QUANTIZED)


class DelayedStaticScales:
    """Delayed scaling for scale_mode "static" over a model's attention calls: the calls of one
    step share its cu_seqlens tensor and come in layer order, so each gets its layer's
    flamia.StaticScaleHistory (K's and V's per-head amax over the last `history` steps plus
    `margin` binades), passed to attn_varlen_func as `static_exponents`: the forward takes its
    exponents from the history and records the amax its own quantize pass measured
    (flamia_forward_args.kv_amax), so K and V are read once more only at a layer's first call.
    `saturated_heads()`: how many (tensor, KV head) pairs of the last step's calls had an
    element beyond 448 * 2^e (a device tensor)."""

    def __init__(self, margin: int = 1, history: int = 16):
        self.margin, self.history = margin, history
        self.layers = {}  # layer -> flamia.StaticScaleHistory
        self._step_key, self._layer = None, 0

    def history_for(self, cu_seqlens):
        import flamia

        if cu_seqlens is not self._step_key:  # a new step: its calls are its layers, in order
            self._step_key, self._layer = cu_seqlens, 0
        layer, self._layer = self._layer, self._layer + 1
        return self.layers.setdefault(layer, flamia.StaticScaleHistory(self.margin, self.history))

    @staticmethod
    def evaluation_exponents(history, k, v):
        """An evaluation call's exponents (no gradient): those the layer's last training call
        took, recording nothing, so held-out K and V never become the scales of the training
        steps that follow; the layer's saturation flags stay as the training step left them."""
        saturated = history.saturated_heads
        e = history.exponents(k, v, record=False)
        history.saturated_heads = saturated
        return e

    def state(self) -> dict:
        """Each layer's history, for a resumed run (train.py --resume) to continue bit for bit."""
        return {"layers": dict(self.layers)}

    def load_state(self, state: dict) -> None:
        self.layers = dict(state["layers"])
        self._step_key, self._layer = None, 0

    def saturated_heads(self):
        """A device tensor (the int 0 before any call recorded); int() of it synchronises."""
        counts = [h.saturated_heads.sum() for h in self.layers.values()
                  if h.saturated_heads is not None]
        return sum(counts) if counts else 0


class AttentionTimer:
    """Brackets each attention call's forward and backward with CUDA events (or wall-clock
    reads on the CPU) and sums their durations per step. The backward bracket opens when the
    gradient reaches the attention output and closes when q, k and v have theirs; on one
    stream the kernels in between are the attention backward's."""

    def __init__(self, device: torch.device, enabled: bool = True):
        self.cuda = device.type == "cuda"
        self.enabled = enabled
        self.fwd, self.bwd = [], []  # (start, end) pairs of this step
        self._open_bwd = []

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    @staticmethod
    def _ms(start, end) -> float:
        if isinstance(start, float):
            return (end - start) * 1e3
        return start.elapsed_time(end)

    def reset(self):
        self.fwd, self.bwd, self._open_bwd = [], [], []

    def step_ms(self) -> tuple[float, float]:
        """(forward, backward) attention milliseconds of the step; call after a synchronise."""
        fwd = sum(self._ms(s, e) for s, e in self.fwd)
        bwd = sum(self._ms(s, e) for s, e in self.bwd)
        return fwd, bwd

    def wrap(self, attend):
        if not self.enabled:
            return attend
        timer = self

        class _BackwardEnd(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v):
                return q.view_as(q), k.view_as(k), v.view_as(v)

            @staticmethod
            def backward(ctx, dq, dk, dv):
                if timer._open_bwd:
                    timer.bwd.append((timer._open_bwd.pop(), timer._mark()))
                return dq, dk, dv

        class _BackwardStart(torch.autograd.Function):
            @staticmethod
            def forward(ctx, out):
                return out.view_as(out)

            @staticmethod
            def backward(ctx, dout):
                timer._open_bwd.append(timer._mark())
                return dout

        def timed(q, k, v, cu_seqlens, max_seqlen):
            if torch.is_grad_enabled() and q.requires_grad:
                q, k, v = _BackwardEnd.apply(q, k, v)
            start = timer._mark()
            out = attend(q, k, v, cu_seqlens, max_seqlen)
            timer.fwd.append((start, timer._mark()))
            if torch.is_grad_enabled() and out.requires_grad:
                out = _BackwardStart.apply(out)
            return out

        return timed


def _sdpa(q, k, v, cu_seqlens, max_seqlen, bounds):
    outs = []
    for start, end in bounds:
        # (1, heads, tokens, head_dim) per document; GQA through enable_gqa.
        qd, kd, vd = (t[start:end].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        od = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True, enable_gqa=True)
        outs.append(od.squeeze(0).transpose(0, 1))
    return torch.cat(outs, dim=0)


def straight_through(value_attend, gradient_attend):
    """An attend whose output equals value_attend's and whose gradient is
    gradient_attend's (each with its own forward). A component's host-side `state` (sdpa's
    document bounds) is passed on; at most one may have one."""

    def attend(q, k, v, cu_seqlens, max_seqlen):
        with torch.no_grad():
            value = value_attend(q, k, v, cu_seqlens, max_seqlen)
        if not torch.is_grad_enabled():  # evaluation: no gradient to carry
            return value
        carrier = gradient_attend(q, k, v, cu_seqlens, max_seqlen)
        return value + (carrier - carrier.detach())  # adds exact zeros: the value unchanged

    states = [a.state for a in (value_attend, gradient_attend) if hasattr(a, "state")]
    if len(states) > 1:
        raise ValueError("straight_through: at most one component may keep host-side state")
    if states:
        attend.state = states[0]
    explains = [a.explain for a in (value_attend, gradient_attend) if hasattr(a, "explain")]
    if explains:  # flamia's account of its kernel path
        attend.explain = explains[0]
    return attend


def with_fake_quantized(attend, operands, scales="per_token"):
    """attend on `operands` (names among q, k, v) rounded to E4M3 at per-token scales, or
    (`unsafe_blocks`) at the audit's unsafe scales over global 32-token blocks."""
    import fp8_emulation

    fake_quantize = getattr(fp8_emulation, FAKE_QUANTIZED_SCALES[scales][0])

    def quantized(q, k, v, cu_seqlens, max_seqlen):
        args = {"q": q, "k": k, "v": v}
        for name in operands:
            args[name] = fake_quantize(args[name])
        return attend(args["q"], args["k"], args["v"], cu_seqlens, max_seqlen)

    if hasattr(attend, "state"):
        quantized.state = attend.state
    return quantized


def make_backend(name: str, device: torch.device, precision: str = "fp8",
                 heads=(8, 2, 128), key_smoothing: str = "none", qk_rotation: str = "none"):
    """Returns (attend, description). `attend(q, k, v, cu_seqlens, max_seqlen)`. The sdpa
    backend loops over documents on the host: set attend.state["bounds"] each step. `heads`
    (heads_q, heads_kv, head_dim) is the shape the bf16 backend probes for native GQA.
    precision, key_smoothing and qk_rotation are flamia's arguments (the other backends
    ignore them)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose one of {BACKENDS}")
    flamia_args = {"precision": precision, "key_smoothing": key_smoothing,
                   "qk_rotation": qk_rotation}
    if name in FAKE_QUANTIZED:
        operands, scales = FAKE_QUANTIZED[name]
        attend, path = make_backend("bf16", device, heads=heads, **flamia_args)
        return with_fake_quantized(attend, operands, scales), (
            f"{path}, on {', '.join(operands)} rounded to E4M3 at "
            f"{FAKE_QUANTIZED_SCALES[scales][1]}")
    if name in MIXED:
        (value, value_path), (gradient, gradient_path) = (
            make_backend(part, device, heads=heads, **flamia_args) for part in MIXED[name])
        return straight_through(value, gradient), (f"value: {value_path}; "
                                                   f"gradient: {gradient_path}")
    if name == "bf16":
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:
            varlen_attn = None
        if varlen_attn is not None and device.type == "cuda":
            return _varlen_backend(varlen_attn, device, heads)
        name = "sdpa"
    if name == "sdpa":
        state = {"bounds": None}

        def attend(q, k, v, cu_seqlens, max_seqlen):
            return _sdpa(q, k, v, cu_seqlens, max_seqlen, state["bounds"])

        attend.state = state
        return attend, ("torch.nn.functional.scaled_dot_product_attention per document "
                        "(is_causal=True, enable_gqa=True)")
    import flamia

    scale_mode = name.removeprefix("flamia_")
    scales = DelayedStaticScales() if scale_mode == "static" else None

    def attend(q, k, v, cu_seqlens, max_seqlen):
        extra = {}
        if scales:  # training records this call's amax; evaluation records nothing
            history = scales.history_for(cu_seqlens)
            extra["static_exponents"] = (history if torch.is_grad_enabled()
                                         else scales.evaluation_exponents(history, k, v))
        return flamia.attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                       causal=True, scale_mode=scale_mode, **flamia_args,
                                       **extra)

    def explain(cu_seqlens, max_seqlen):
        """flamia's own account of the kernel path for the model's shapes, as a training step
        runs it (inputs that want a gradient: the forward that keeps the backward's operands)."""
        heads_q, heads_kv, head_dim = heads
        tokens = int(cu_seqlens[-1])

        def empty(h):
            return torch.empty(tokens, h, head_dim, device=device, dtype=torch.bfloat16,
                               requires_grad=True)

        extra = ({"static_exponents": torch.zeros(2, heads_kv, dtype=torch.int8, device=device)}
                 if scales else {})
        return flamia.explain(empty(heads_q), empty(heads_kv), empty(heads_kv), cu_seqlens,
                              cu_seqlens, max_seqlen, max_seqlen, causal=True,
                              scale_mode=scale_mode, **flamia_args, **extra)

    attend.explain = explain
    attend.static_scales = scales  # flamia_static: the delayed scaling state (saturation counts)
    arguments = ", ".join(f"{key}={value!r}" for key, value in flamia_args.items())
    delayed = (f", static_exponents=StaticScaleHistory: the last {scales.history} steps' "
               f"forward amax + {scales.margin} binade(s)" if scales else "")
    return attend, (f"flamia.attn_varlen_func(causal=True, scale_mode={scale_mode!r}, "
                    f"{arguments}{delayed})")


def _varlen_backend(varlen_attn, device, heads):
    """varlen_attn with native GQA when the kernel takes fewer KV heads (probed once, here,
    outside any compiled region), else with the KV heads repeated."""
    heads_q, heads_kv, head_dim = heads
    probe_tokens = 128
    cu = torch.tensor([0, probe_tokens // 2, probe_tokens], dtype=torch.int32, device=device)

    def probe(h):
        return torch.randn(probe_tokens, h, head_dim, device=device, dtype=torch.bfloat16)

    try:
        varlen_attn(probe(heads_q), probe(heads_kv), probe(heads_kv), cu, cu, probe_tokens // 2,
                    probe_tokens // 2, window_size=(-1, 0))
        repeat_kv = False
    except RuntimeError:
        repeat_kv = heads_q != heads_kv
    group = heads_q // heads_kv

    def attend(q, k, v, cu_seqlens, max_seqlen):
        if repeat_kv:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                           window_size=(-1, 0))

    gqa = "KV heads repeated (no native GQA)" if repeat_kv else "native GQA"
    return attend, ("torch.nn.attention.varlen.varlen_attn (PyTorch's FlashAttention varlen "
                    f"kernels), causal via window_size=(-1, 0), {gqa}")
