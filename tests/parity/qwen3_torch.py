"""Qwen 3, dense and mixture-of-experts, in plain PyTorch: the twin that titan's Qwen 3 is checked against.

Written from the Qwen 3 reports and Hugging Face's published configs, not from titan's code:
attention with an RMSNorm over each head of q and k (QK-norm) before rotate-half RoPE, a head size
of its own, grouped-query heads; a SwiGLU feed-forward or, in the MoE model, a router (linear ->
softmax -> top-k, renormalised when norm_topk_prob) over SwiGLU experts, each expert run on the
tokens routed to it, as Hugging Face's Qwen3MoeSparseMoeBlock does.

Load balancing: the Switch Transformer loss per MoE layer, E * sum_e f_e * P_e with f_e the share
of the token choices that went to expert e and P_e its mean router probability, averaged over the
layers and times a coefficient; and DeepSeek-V3's auxiliary-loss-free bias, added to the scores
for the choice only and moved by rate * sign(mean load - load) (centred) after each step.

Parameter names are TorchTitan's qwen3 (tok_embeddings, layers.N.attention.{wq,wk,wv,wo,q_norm,k_norm},
layers.N.feed_forward.{w1,w2,w3} or layers.N.moe.router.gate, layers.N.moe.experts.{w1,w2,w3},
norm, output), so a state dict moves between this model and titan's as it is.
Runs on torch 1.13 (Debian's).
"""
import math
from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class MoEArgs:
    num_experts: int = 8
    top_k: int = 2
    hidden_dim: int = 256
    norm_topk_prob: bool = True
    load_balance_bias: bool = False
    bias_update_rate: float = 1e-3


@dataclass
class ModelArgs:
    dim: int = 1024
    n_layers: int = 28
    n_heads: int = 16
    n_kv_heads: int = 8
    head_dim: int = 128
    ffn_dim: int = 3072
    vocab_size: int = 151936
    norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    max_seq_len: int = 40960
    tie_embeddings: bool = False
    moe: Optional[MoEArgs] = None
    aux_loss_coeff: float = 0.001


def rope_table(args: ModelArgs):
    """cos and sin of position * frequency, [max_seq_len, head_dim / 2] float32 (angles in float64)."""
    d = args.head_dim
    freqs = torch.tensor([args.rope_theta ** (-(2 * i) / d) for i in range(d // 2)], dtype=torch.float64)
    angles = torch.outer(torch.arange(args.max_seq_len, dtype=torch.float64), freqs)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """x [B, S, H, D]: dims i and i + D/2 rotate together (Hugging Face's rotate_half)."""
    s = x.shape[1]
    c = torch.cat((cos[:s], cos[:s]), dim=-1)[None, :, None, :].to(x.dtype)
    sn = torch.cat((sin[:s], sin[:s]), dim=-1)[None, :, None, :].to(x.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * c + rotated * sn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def causal_attention(q, k, v):
    """q [B, S, Hq, D], k and v [B, S, Hkv, D] -> [B, S, Hq, D]; query head h reads kv head h // (Hq / Hkv)."""
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    s = q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.full((s, s), float("-inf"), dtype=q.dtype).triu(1)
    return torch.softmax(scores + mask, dim=-1).matmul(v).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)
        self.q_norm = RMSNorm(args.head_dim, args.norm_eps)
        self.k_norm = RMSNorm(args.head_dim, args.norm_eps)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = apply_rope(self.q_norm(self.wq(x).view(b, s, -1, self.head_dim)), cos, sin)
        k = apply_rope(self.k_norm(self.wk(x).view(b, s, -1, self.head_dim)), cos, sin)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        return self.wo(causal_attention(q, k, v).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def topk_lowest_index(values, k):
    """The k largest along the last dim, best first; equal values in ascending index (a stable sort)."""
    _, order = torch.sort(values, dim=-1, descending=True, stable=True)
    return order[..., :k]


class Router(nn.Module):
    def __init__(self, dim: int, moe: MoEArgs):
        super().__init__()
        self.moe = moe
        self.gate = nn.Linear(dim, moe.num_experts, bias=False)
        if moe.load_balance_bias:
            self.register_buffer("expert_bias", torch.zeros(moe.num_experts))
        else:
            self.expert_bias = None

    def forward(self, x):
        """x [T, dim] -> scores [T, E], weights [T, k], ids [T, k]."""
        scores = torch.softmax(self.gate(x), dim=-1)
        choice = scores.detach() if self.expert_bias is None else scores.detach() + self.expert_bias
        ids = topk_lowest_index(choice, self.moe.top_k)
        weights = scores.gather(1, ids)
        if self.moe.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
        return scores, weights, ids


class Experts(nn.Module):
    def __init__(self, dim: int, moe: MoEArgs):
        super().__init__()
        e, h = moe.num_experts, moe.hidden_dim
        self.w1 = nn.Parameter(torch.empty(e, h, dim))
        self.w2 = nn.Parameter(torch.empty(e, dim, h))
        self.w3 = nn.Parameter(torch.empty(e, h, dim))

    def expert(self, e, x):
        return F.silu(x @ self.w1[e].t()) * (x @ self.w3[e].t()) @ self.w2[e].t()


class MoE(nn.Module):
    def __init__(self, dim: int, moe: MoEArgs):
        super().__init__()
        self.moe = moe
        self.router = Router(dim, moe)
        self.experts = Experts(dim, moe)

    def forward(self, x):
        """x [B, S, dim] -> (out, load-balancing loss, tokens per expert)."""
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        scores, weights, ids = self.router(x)
        out = torch.zeros_like(x)
        for e in range(self.moe.num_experts):
            token, choice = torch.where(ids == e)
            if token.numel():
                out.index_add_(0, token, self.experts.expert(e, x[token]) * weights[token, choice, None])
        counts = torch.bincount(ids.flatten(), minlength=self.moe.num_experts)
        share = counts.to(scores.dtype) / ids.numel()
        aux = self.moe.num_experts * (share * scores.mean(0)).sum()
        return out.view(shape), aux, counts

    @torch.no_grad()
    def update_expert_bias(self, counts):
        counts = counts.to(torch.float64)
        delta = self.moe.bias_update_rate * torch.sign(counts.mean() - counts)
        self.router.expert_bias += (delta - delta.mean()).to(self.router.expert_bias.dtype)


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        if args.moe is None:
            self.feed_forward = FeedForward(args.dim, args.ffn_dim)
        else:
            self.moe = MoE(args.dim, args.moe)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.init_std = 0.02 / math.sqrt(2 * (layer_id + 1))

    def forward(self, x, cos, sin):
        """-> (out, aux loss or None, tokens per expert or None)."""
        h = x + self.attention(self.attention_norm(x), cos, sin)
        if hasattr(self, "moe"):
            y, aux, counts = self.moe(self.ffn_norm(h))
            return h + y, aux, counts
        return h + self.feed_forward(self.ffn_norm(h)), None, None


def trunc_normal_(t, std, a, b, generator=None):
    """Normal(0, std) truncated to [a, b] by inverting the CDF (torch 1.13's trunc_normal_ takes no generator)."""
    with torch.no_grad():
        cdf = lambda x: 0.5 * (1 + math.erf(x / (std * math.sqrt(2))))
        u = torch.rand(t.shape, generator=generator, dtype=torch.float64) * (cdf(b) - cdf(a)) + cdf(a)
        t.copy_((torch.erfinv(2 * u - 1) * std * math.sqrt(2)).clamp_(a, b))
    return t


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(i, args) for i in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        if not args.tie_embeddings:
            self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        cos, sin = rope_table(args)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.aux_loss = None
        self.tokens_per_expert: List[torch.Tensor] = []

    def init_weights(self, generator=None):
        """TorchTitan's initialisation; the tied embedding takes the output projection's."""
        with torch.no_grad():
            self.tok_embeddings.weight.normal_(0.0, 1.0, generator=generator)
            for layer in self.layers:
                a = layer.attention
                weights = [(a.wq.weight, 0.02), (a.wk.weight, 0.02), (a.wv.weight, 0.02), (a.wo.weight, layer.init_std)]
                if hasattr(layer, "moe"):
                    x = layer.moe.experts
                    weights += [(layer.moe.router.gate.weight, layer.init_std), (x.w1, 0.02),
                                (x.w2, layer.init_std), (x.w3, layer.init_std)]
                else:
                    f = layer.feed_forward
                    weights += [(f.w1.weight, 0.02), (f.w2.weight, layer.init_std), (f.w3.weight, layer.init_std)]
                for w, std in weights:
                    trunc_normal_(w, std, -2.0, 2.0, generator)
            std = self.args.dim ** -0.5
            out = self.tok_embeddings.weight if self.args.tie_embeddings else self.output.weight
            trunc_normal_(out, std, -3 * std, 3 * std, generator)

    def forward(self, tokens):
        """Logits; sets self.aux_loss (coefficient x mean over layers; None when dense) and
        self.tokens_per_expert (per MoE layer)."""
        h = self.tok_embeddings(tokens)
        aux, counts = [], []
        for layer in self.layers:
            h, a, c = layer(h, self.rope_cos, self.rope_sin)
            if a is not None:
                aux.append(a)
                counts.append(c)
        self.aux_loss = self.args.aux_loss_coeff * torch.stack(aux).mean() if aux else None
        self.tokens_per_expert = counts
        h = self.norm(h)
        weight = self.tok_embeddings.weight if self.args.tie_embeddings else self.output.weight
        return F.linear(h, weight)

    def end_step(self, counts_per_layer):
        """After the optimizer step: the expert-bias update from the step's tokens per expert."""
        for layer, counts in zip(self.layers, counts_per_layer):
            if layer.moe.router.expert_bias is not None:
                layer.moe.update_expert_bias(counts)
