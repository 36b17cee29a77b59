"""Reference cases for RMSNorm, LayerNorm and rotary embeddings (both layouts, Llama 3.1 scaling).

torch 1.13 has no rms_norm, so its reference is Llama's formula written in torch. RoPE follows
Hugging Face (rotate_half) and Meta's reference (interleaved, complex multiply); its cos/sin table
is computed in f64 and rounded to f32, as titan's is (an f32 angle would be off by ~pos * 6e-8 rad).
"""
import math

import torch
import torch.nn.functional as F


def _rand(gen, *shape, lo=-1.0, hi=1.0):
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).float()


def _with_grads(inputs, out, gen):
    cot = _rand(gen, *out.shape)
    out.backward(cot)
    t = {"out.y": out, "cot.y": cot}
    for name, v in inputs.items():
        t["in." + name] = v
        t["grad." + name] = v.grad
    return t


def _rms_norm(shape, weight, eps=1e-6):
    def case(gen):
        x = _rand(gen, *shape, lo=-2, hi=3).requires_grad_()
        inputs = {"x": x}
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        if weight:
            w = _rand(gen, shape[-1], lo=0.5, hi=1.5).requires_grad_()
            inputs["w"] = w
            y = y * w
        return _with_grads(inputs, y, gen), {"eps": eps}
    return case


def _layer_norm(shape, weight, bias, eps=1e-5, offset=0.0):
    def case(gen):
        x = (_rand(gen, *shape, lo=-2, hi=3) + offset).requires_grad_()
        inputs = {"x": x}
        w = b = None
        if weight:
            w = inputs["w"] = _rand(gen, shape[-1], lo=0.5, hi=1.5).requires_grad_()
        if bias:
            b = inputs["b"] = _rand(gen, shape[-1]).requires_grad_()
        y = F.layer_norm(x, (shape[-1],), w, b, eps)
        return _with_grads(inputs, y, gen), {"eps": eps}
    return case


def _inv_freq(head_dim, theta, scaling):
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scaling is None:
        return inv_freq
    # Hugging Face's _compute_llama3_parameters, in f64.
    factor, low, high, orig = scaling
    low_freq_wavelen, high_freq_wavelen = orig / low, orig / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def _rope(layout, batch, seq, heads, head_dim, start_pos, max_seq, theta, scaling=None):
    def case(gen):
        angles = torch.outer(torch.arange(max_seq, dtype=torch.float64), _inv_freq(head_dim, theta, scaling))
        cos, sin = angles.cos().float(), angles.sin().float()
        c, s = cos[start_pos:start_pos + seq], sin[start_pos:start_pos + seq]
        x = _rand(gen, batch, seq, heads, head_dim).requires_grad_()
        if layout == "rotate_half":
            c2, s2 = torch.cat([c, c], -1)[None, :, None, :], torch.cat([s, s], -1)[None, :, None, :]
            x1, x2 = x[..., :head_dim // 2], x[..., head_dim // 2:]
            y = x * c2 + torch.cat([-x2, x1], -1) * s2
        else:
            freqs_cis = torch.complex(c, s)[None, :, None, :]
            xc = torch.view_as_complex(x.reshape(batch, seq, heads, head_dim // 2, 2))
            y = torch.view_as_real(xc * freqs_cis).flatten(3)
        t = _with_grads({"x": x}, y, gen)
        t.update({"out.cos": cos, "out.sin": sin})
        meta = {"interleaved": int(layout == "interleaved"), "start_pos": start_pos, "max_seq": max_seq,
                "theta": theta, "scaled": int(scaling is not None)}
        if scaling is not None:
            meta.update(dict(zip(("factor", "low_freq_factor", "high_freq_factor", "original_max_position"),
                                 scaling)))
        return t, meta
    return case


LLAMA31 = (8.0, 1.0, 4.0, 8192)

CASES = {
    "rms_norm_weight": _rms_norm((4, 7, 129), True),
    "rms_norm_noweight": _rms_norm((3, 129), False),
    "rms_norm_wide": _rms_norm((2, 3, 4096), True),
    "rms_norm_many_rows": _rms_norm((2048, 256), True),
    "layer_norm_affine": _layer_norm((4, 7, 129), True, True),
    "layer_norm_plain": _layer_norm((3, 129), False, False),
    "layer_norm_weight_only": _layer_norm((5, 33), True, False),
    "layer_norm_bias_only": _layer_norm((5, 33), False, True),
    "layer_norm_wide": _layer_norm((2, 3, 4096), True, True),
    "layer_norm_many_rows": _layer_norm((2048, 256), True, True),
    "layer_norm_offset": _layer_norm((16, 512), True, True, offset=100.0),
    "rope_half": _rope("rotate_half", 2, 7, 3, 130, 5, 16, 10000.0),
    "rope_interleaved": _rope("interleaved", 2, 7, 3, 130, 5, 16, 10000.0),
    "rope_half_llama31": _rope("rotate_half", 2, 9, 4, 128, 8000, 8192 + 16, 500000.0, LLAMA31),
    "rope_interleaved_llama31": _rope("interleaved", 1, 9, 2, 128, 8000, 8192 + 16, 500000.0, LLAMA31),
}
