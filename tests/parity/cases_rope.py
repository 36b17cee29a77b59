"""Reference cases for RoPE as Hugging Face configures it: every rope_type of transformers'
ROPE_INIT_FUNCTIONS, through a family's rotary embedding class (Llama, Phi-3, GPT-NeoX), and partial
rotary applied by the families' own apply_rotary_pos_emb (rotate_half: Phi-3, GPT-NeoX; interleaved:
GPT-J).

Each case holds `config`, a config.json (in transformers 4's or 5's layout) that the C++ test reads
with titan's parser, and the cos/sin table transformers' rotary embedding gives for positions
[0, max_seq) in one forward (so that "dynamic" and "longrope" see a sequence of max_seq tokens).
transformers computes the angles in f32, off by ~pos * 6e-8 rad at long positions; titan computes
them in f64. The reference therefore runs transformers' own code with torch's f32 replaced by f64
(`_f64`), and checks that it agrees with the unmodified f32 run to f32's precision.
"""
import contextlib
import json

import torch
from transformers import GPTNeoXConfig, LlamaConfig, Phi3Config
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_apply
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding
from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb as phi3_apply

FAMILIES = {
    "LlamaForCausalLM": (LlamaConfig, LlamaRotaryEmbedding, llama_apply),
    "Phi3ForCausalLM": (Phi3Config, Phi3RotaryEmbedding, phi3_apply),
    "GPTNeoXForCausalLM": (GPTNeoXConfig, GPTNeoXRotaryEmbedding, neox_apply),
}


@contextlib.contextmanager
def _f64():
    """transformers' RoPE code with torch.float, torch.float32 and Tensor.float meaning f64."""
    saved = torch.float, torch.float32, torch.Tensor.float, torch.get_default_dtype()
    torch.float = torch.float32 = torch.float64
    torch.Tensor.float = lambda self, *args, **kwargs: self.double()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.float, torch.float32, torch.Tensor.float = saved[:3]
        torch.set_default_dtype(saved[3])


def _tables(arch, config, max_seq):
    config_cls, embedding_cls, _ = FAMILIES[arch]
    emb = embedding_cls(config_cls(**json.loads(json.dumps(config))))
    cos, sin = emb(torch.zeros(1, dtype=torch.get_default_dtype()), torch.arange(max_seq)[None])
    return cos[0], sin[0]


def _rand(gen, *shape):
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1).float()


def _case(arch, config, max_seq, apply=None):
    """apply: (batch, seq, heads, start_pos) for a forward and backward through the family's
    apply_rotary_pos_emb on x [batch, seq, heads, head_dim] at positions start_pos onwards."""
    def case(gen):
        with _f64():
            cos, sin = _tables(arch, config, max_seq)
        cos32, sin32 = _tables(arch, config, max_seq)
        # f32's angle error grows with the position; 4e-7 rad per position bounds it here.
        bound = 1e-5 + 4e-7 * max_seq
        assert (cos32.double() - cos).abs().max() < bound and (sin32.double() - sin).abs().max() < bound, arch
        half = cos.shape[-1] // 2
        t = {"out.cos": cos[:, :half].contiguous(), "out.sin": sin[:, :half].contiguous()}
        meta = {"config": json.dumps(config), "architecture": arch, "max_seq": max_seq}
        if apply is not None:
            batch, seq, heads, start = apply
            head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
            x = _rand(gen, batch, seq, heads, head_dim).requires_grad_()
            c = cos[start:start + seq].float()[None].expand(batch, -1, -1)
            s = sin[start:start + seq].float()[None].expand(batch, -1, -1)
            y, _ = FAMILIES[arch][2](x, x.detach(), c, s, unsqueeze_dim=2)
            cot = _rand(gen, *y.shape)
            y.backward(cot)
            t.update({"in.x": x, "out.y": y, "cot.y": cot, "grad.x": x.grad})
            meta["start_pos"] = start
        return t, meta
    return case


def _gptj_partial(gen):
    """GPT-J: the first rotary_dim dims of each head rotate in interleaved pairs (rotate_every_two)."""
    batch, seq, heads, head_dim, rotary_dim, start, max_seq = 2, 5, 3, 16, 6, 7, 16
    with _f64():
        sincos = create_sinusoidal_positions(max_seq, rotary_dim)
    sin, cos = sincos[:, :rotary_dim // 2], sincos[:, rotary_dim // 2:]
    x = _rand(gen, batch, seq, heads, head_dim).requires_grad_()
    s = sin[start:start + seq].float()[None].expand(batch, -1, -1)
    c = cos[start:start + seq].float()[None].expand(batch, -1, -1)
    y = torch.cat([gptj_apply(x[..., :rotary_dim], s, c), x[..., rotary_dim:]], dim=-1)
    cot = _rand(gen, *y.shape)
    y.backward(cot)
    t = {"out.cos": cos.contiguous(), "out.sin": sin.contiguous(), "in.x": x, "out.y": y, "cot.y": cot,
         "grad.x": x.grad}
    return t, {"rotary_dim": rotary_dim, "max_seq": max_seq, "start_pos": start, "theta": 10000.0}


def _llama(rope, max_position_embeddings=64, **extra):
    return {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
            "max_position_embeddings": max_position_embeddings, **rope, **extra}


def _phi3(rope, **extra):
    return {"architectures": ["Phi3ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
            "max_position_embeddings": 128, "original_max_position_embeddings": 32, **rope, **extra}


LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0,
            "short_factor": [1.0, 1.25, 1.5, 3.0], "long_factor": [2.0, 3.5, 4.0, 9.0]}

CASES = {
    "rope_hf_default": _case("LlamaForCausalLM", _llama(
        {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}), 100),
    # transformers 4's layout, kind under "type" (before 4.45).
    "rope_hf_linear": _case("LlamaForCausalLM", _llama(
        {"rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 4.0}}), 100),
    "rope_hf_dynamic_past": _case("LlamaForCausalLM", _llama(
        {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}}), 200),
    "rope_hf_dynamic_within": _case("LlamaForCausalLM", _llama(
        {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}}), 48),
    "rope_hf_yarn": _case("LlamaForCausalLM", _llama(
        {"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 32}}, 128), 160,
        apply=(2, 6, 3, 150)),
    # DeepSeek's mscale pair, betas of its own, no truncation, a partial rotary factor.
    "rope_hf_yarn_mscale": _case("LlamaForCausalLM", _llama(
        {"rope_theta": 50000.0,
         "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16,
                          "mscale": 0.8, "mscale_all_dim": 0.5, "beta_fast": 16, "beta_slow": 2,
                          "truncate": False, "partial_rotary_factor": 0.5}}, 128), 140),
    # factor null: max_position_embeddings / original_max_position_embeddings; attention_factor given.
    "rope_hf_yarn_attention_factor": _case("LlamaForCausalLM", _llama(
        {"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": None,
                             "original_max_position_embeddings": 32, "attention_factor": 0.75}}, 96), 100),
    # Phi-3: original_max_position_embeddings at the top level, factor from it, partial rotary.
    "rope_hf_longrope_long": _case("Phi3ForCausalLM", _phi3(
        {"rope_parameters": {**LONGROPE, "partial_rotary_factor": 0.5}}), 100, apply=(2, 5, 3, 90)),
    "rope_hf_longrope_short": _case("Phi3ForCausalLM", _phi3(
        {"rope_scaling": {**{k: v for k, v in LONGROPE.items() if k not in ("rope_type", "rope_theta")},
                          "type": "longrope", "factor": 2.0}, "rope_theta": 10000.0},
        partial_rotary_factor=0.5), 24, apply=(1, 7, 2, 3)),
    "rope_hf_llama3": _case("LlamaForCausalLM", _llama(
        {"rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 32}}, 256), 300),
    # GPT-NeoX: a quarter of the head rotates (rotary_pct).
    "rope_hf_neox_partial": _case("GPTNeoXForCausalLM", {
        "architectures": ["GPTNeoXForCausalLM"], "hidden_size": 128, "num_attention_heads": 4,
        "max_position_embeddings": 64,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}},
        80, apply=(2, 9, 3, 60)),
    "rope_gptj_partial_interleaved": _gptj_partial,
}
