"""Reference case for the auxiliary-loss-free expert bias (DeepSeek-V3; titan's
moe.load_balance_bias), which transformers' Qwen 3 MoE has no counterpart of: a router alone, as
the paper defines it, over 10 steps of fixed gate weights and fresh tokens.

Each step the token's k experts are the best by score + bias, with softmax scores of the gate's
logits (stable order on ties); the Switch Transformer loss E * sum_e f_e P_e is taken of that
choice (f_e: the share of the choices that went to expert e, P_e: its mean score); then every
bias moves by rate * sign(mean load - load), centred so that the biases sum to 0. The gate
favours some experts, so the bias has loads to even out and changes the choice within the steps.
"""
import torch

EXPERTS = 8
TOP_K = 2
DIM = 16
TOKENS = 32
STEPS = 10
RATE = 0.05


def _route(x, gate, bias):
    scores = torch.softmax(x @ gate.t(), dim=-1)
    ids = torch.sort(scores + bias, dim=-1, descending=True, stable=True).indices[:, :TOP_K]
    counts = torch.bincount(ids.flatten(), minlength=EXPERTS)
    aux = EXPERTS * (counts.float() / ids.numel() * scores.mean(0)).sum()
    return counts, aux


def _expert_bias(gen):
    gate = 0.5 * torch.randn(EXPERTS, DIM, generator=gen)
    gate[:, 0] += torch.linspace(-1.0, 1.0, EXPERTS)
    x = torch.randn(STEPS, TOKENS, DIM, generator=gen)
    x[..., 0] += 2.0  # with the gate's first column, a lean towards the last experts
    bias = torch.zeros(EXPERTS)
    counts, biases, aux = [], [], []
    for s in range(STEPS):
        c, a = _route(x[s], gate, bias)
        delta = RATE * torch.sign(c.double().mean() - c.double())
        bias = bias + (delta - delta.mean()).float()
        counts.append(c)
        biases.append(bias.clone())
        aux.append(a)
    unbiased, _ = _route(x[-1], gate, torch.zeros(EXPERTS))
    assert not torch.equal(unbiased, counts[-1]), "the bias never changed the choice: nothing is tested"
    return ({"in.gate": gate, "in.x": x, "out.counts": torch.stack(counts), "out.bias": torch.stack(biases),
             "out.aux_loss": torch.stack(aux)},
            {"experts": EXPERTS, "top_k": TOP_K, "rate": RATE})


CASES = {"moe_expert_bias": _expert_bias}
