"""Reference cases for attention with logit soft-capping (Gemma 2's attn_logit_softcapping): the
attention function of transformers' Gemma 2 itself (eager_attention_forward: scores = q k^T *
scaling, tanh(scores / cap) * cap, the additive mask, softmax; kv heads repeated over their
group), causal and under a sliding window, in f64."""
import types

import torch
from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward


def _rand(gen, *shape, scale=1.0):
    return ((torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1) * scale).to(torch.float32)


def _softcap_attention(window_left):
    def case(gen):
        B, S, Hq, Hkv, D = 2, 37, 4, 2, 16
        scale, cap = 0.3, 2.0  # scores of spread ~2.4: the cap bends most of them
        q = _rand(gen, B, S, Hq, D, scale=3.0).requires_grad_()
        k = _rand(gen, B, S, Hkv, D, scale=3.0).requires_grad_()
        v = _rand(gen, B, S, Hkv, D).requires_grad_()
        i = torch.arange(S)
        seen = i[None, :] <= i[:, None]
        if window_left is not None:  # the query and the window_left keys before it
            seen &= i[None, :] >= i[:, None] - window_left
        mask = torch.zeros(S, S, dtype=torch.float64).masked_fill(~seen, float("-inf"))[None, None]
        module = types.SimpleNamespace(num_key_value_groups=Hq // Hkv, training=False, head_dim=D)
        # titan's layout [B, S, H, D] to transformers' [B, H, S, D]; the output comes back as [B, S, H, D]
        out, _ = eager_attention_forward(module, q.double().transpose(1, 2), k.double().transpose(1, 2),
                                         v.double().transpose(1, 2), mask, scaling=scale, softcap=cap)
        out = out.float()
        cot = _rand(gen, *out.shape)
        out.backward(cot)
        return ({"in.q": q, "in.k": k, "in.v": v, "out.y": out, "cot.y": cot,
                 "grad.q": q.grad, "grad.k": k.grad, "grad.v": v.grad},
                {"scale": scale, "softcap": cap, "window_left": -1 if window_left is None else window_left})
    return case


CASES = {
    "attention_softcap_causal": _softcap_attention(None),
    "attention_softcap_window": _softcap_attention(8),
}
