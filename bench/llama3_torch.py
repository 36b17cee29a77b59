"""Llama 3 as a PyTorch 2 user trains it, TorchTitan's model: bench/train_step.cpp's reference.

Module and parameter names are TorchTitan's (tok_embeddings.weight, layers.0.attention.wq.weight,
layers.0.feed_forward.w1.weight, norm.weight, output.weight, ...), so a state dict moves between
this model, titan's and TorchTitan's as it is. nn.RMSNorm, F.scaled_dot_product_attention
(is_causal, enable_gqa) and F.silu, as TorchTitan writes them. RoPE pairs dims (2i, 2i + 1), as
Meta's reference and TorchTitan do; the angles are computed in float64 and stored float32, as
titan's RopeTable is, and the initialisation is TorchTitan's, as titan's is, so first losses of
the two compare.
"""
import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class RopeScaling:
    """Llama 3.1 frequency scaling ("rope_type": "llama3")."""
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclass
class ModelArgs:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 8
    vocab_size: int = 128256
    multiple_of: int = 256
    ffn_dim_multiplier: Optional[float] = None
    ffn_dim: int = 0  # the SwiGLU hidden size as given; 0: from Meta's rule (ffn_hidden_dim)
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    use_scaled_rope: bool = True
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    max_seq_len: int = 131072

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def ffn_hidden_dim(self) -> int:
        if self.ffn_dim > 0:
            return self.ffn_dim
        hidden = int(2 * 4 * self.dim / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)


def rope_table(args: ModelArgs):
    """cos and sin of position * frequency, [max_seq_len, head_dim / 2] float32."""
    d = args.head_dim
    freqs = [args.rope_theta ** (-(2 * i) / d) for i in range(d // 2)]
    if args.use_scaled_rope:
        s = args.rope_scaling
        orig = float(s.original_max_position)
        scaled = []
        for f in freqs:
            wavelen = 2 * math.pi / f
            if wavelen < orig / s.high_freq_factor:
                scaled.append(f)
            elif wavelen > orig / s.low_freq_factor:
                scaled.append(f / s.factor)
            else:
                smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
                scaled.append((1 - smooth) * f / s.factor + smooth * f)
        freqs = scaled
    angles = torch.outer(torch.arange(args.max_seq_len, dtype=torch.float64),
                         torch.tensor(freqs, dtype=torch.float64))
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """x [B, S, H, D]: each pair (2i, 2i + 1) rotated by angle[position, i]."""
    s = x.shape[1]
    c = cos[:s, None, :].to(x.dtype)
    sn = sin[:s, None, :].to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * c - odd * sn, even * sn + odd * c), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = apply_rope(self.wq(x).view(b, s, -1, self.head_dim), cos, sin)
        k = apply_rope(self.wk(x).view(b, s, -1, self.head_dim), cos, sin)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True, enable_gqa=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.ffn_hidden_dim)
        self.attention_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.init_std = 0.02 / math.sqrt(2 * (layer_id + 1))

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(i, args) for i in range(args.n_layers))
        self.norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        cos, sin = rope_table(args)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def init_weights(self, generator=None):
        """TorchTitan's Llama 3 initialisation (depth-scaled std for wo, w2, w3)."""
        with torch.no_grad():
            self.tok_embeddings.weight.normal_(0.0, 1.0, generator=generator)
            for layer in self.layers:
                a, f = layer.attention, layer.feed_forward
                for w, std in ((a.wq, 0.02), (a.wk, 0.02), (a.wv, 0.02), (a.wo, layer.init_std),
                               (f.w1, 0.02), (f.w2, layer.init_std), (f.w3, layer.init_std)):
                    nn.init.trunc_normal_(w.weight, 0.0, std, -2.0, 2.0, generator=generator)
                layer.attention_norm.weight.fill_(1.0)
                layer.ffn_norm.weight.fill_(1.0)
            self.norm.weight.fill_(1.0)
            std = self.args.dim ** -0.5
            nn.init.trunc_normal_(self.output.weight, 0.0, std, -3 * std, 3 * std, generator=generator)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.rope_cos, self.rope_sin)
        return self.output(self.norm(h))
