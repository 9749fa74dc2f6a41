"""A Llama-style decoder over packed documents (RMSNorm, RoPE, SwiGLU, GQA; optional QK-norm).

The model works on one packed stream of tokens (total_tokens,) with int32 cu_seqlens marking the
documents, as varlen attention does: no padding, and attention never crosses a document.
Attention is a function `attend(q, k, v, cu_seqlens, max_seqlen) -> out` on (tokens, heads,
head_dim) BF16 tensors, chosen by attention.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelConfig:
    vocab: int = 320  # 256 bytes + BOS (256), padded to a multiple of 64
    d_model: int = 768
    n_layers: int = 10
    n_heads: int = 6
    n_kv_heads: int = 2
    head_dim: int = 128
    ffn_hidden: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_positions: int = 8192
    # RMSNorm of each head's q and k before RoPE (OLMo 2, Qwen 3, Gemma 3): fixes their scale up to
    # learnable gains, and with it the absolute error of FP8 Q·Kᵀ (docs/results-log.md, "lower-noise
    # recipe").
    qk_norm: bool = False


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight).to(x.dtype)


def rope_tables(cfg: ModelConfig, device) -> tuple[torch.Tensor, torch.Tensor]:
    half = cfg.head_dim // 2
    inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(half, dtype=torch.float32) / half)
    angles = torch.outer(torch.arange(cfg.max_positions, dtype=torch.float32), inv_freq)
    return angles.cos().to(device), angles.sin().to(device)


def apply_rope(x, cos, sin, dtype):
    """x (tokens, heads, head_dim); cos, sin (tokens, head_dim / 2). Rotates channel pairs
    (i, i + head_dim / 2) in FP32; returns `dtype`."""
    x32 = x.float()
    x1, x2 = x32.chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        q_dim = cfg.n_heads * cfg.head_dim
        kv_dim = cfg.n_kv_heads * cfg.head_dim
        self.wqkv = nn.Linear(cfg.d_model, q_dim + 2 * kv_dim, bias=False)
        self.wo = nn.Linear(q_dim, cfg.d_model, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)

    def forward(self, x, cos, sin, cu_seqlens, max_seqlen, attend):
        cfg = self.cfg
        tokens = x.shape[0]
        q_dim = cfg.n_heads * cfg.head_dim
        kv_dim = cfg.n_kv_heads * cfg.head_dim
        # Attention takes BF16 on the GPU; CPU smoke tests run in FP32 (BF16 is slow there).
        dtype = torch.bfloat16 if x.is_cuda else torch.float32
        q, k, v = self.wqkv(x).split((q_dim, kv_dim, kv_dim), dim=-1)
        q = q.view(tokens, cfg.n_heads, cfg.head_dim)
        k = k.view(tokens, cfg.n_kv_heads, cfg.head_dim)
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, cos, sin, dtype)
        k = apply_rope(k, cos, sin, dtype)
        v = v.reshape(tokens, cfg.n_kv_heads, cfg.head_dim).to(dtype)
        out = attend(q, k, v, cu_seqlens, max_seqlen)
        return self.wo(out.reshape(tokens, q_dim))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w13 = nn.Linear(cfg.d_model, 2 * cfg.ffn_hidden, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=False)

    def forward(self, x):
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x, cos, sin, cu_seqlens, max_seqlen, attend):
        x = x + self.attn(self.attn_norm(x), cos, sin, cu_seqlens, max_seqlen, attend)
        return x + self.ffn(self.ffn_norm(x))


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.rope_cos: torch.Tensor | None = None
        self.rope_sin: torch.Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        # Output projections scaled down with depth (GPT-2 style) keep the residual stream's
        # variance flat at initialisation.
        out_std = std / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, out_std if name.endswith(("wo.weight", "w2.weight"))
                                else std)

    def forward(self, tokens, positions, cu_seqlens, max_seqlen, attend):
        if self.rope_cos is None or self.rope_cos.device != tokens.device:
            self.rope_cos, self.rope_sin = rope_tables(self.cfg, tokens.device)
        cos, sin = self.rope_cos[positions], self.rope_sin[positions]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin, cu_seqlens, max_seqlen, attend)
        return self.head(self.norm(x))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
