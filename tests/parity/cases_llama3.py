"""Reference case for Llama 3: a tiny model (grouped-query attention, scaled RoPE) trained for 20
steps by the PyTorch twin in llama3_torch.py with torch.optim.AdamW and grad-norm clipping.

The case owns the initial weights (drawn from its own generator, TorchTitan's init) and the token
batches; titan loads both by TorchTitan's parameter names and must reproduce the first step's
logits and gradients and every step's loss and grad norm.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama3_torch  # noqa: E402

STEPS = 20
BATCH = 2
SEQ = 32
ARGS = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256, multiple_of=32, max_seq_len=SEQ)
# Grad norms run 1.00 .. 1.37 over the run, so max_norm 1.1 clips some steps and not others.
HYPER = {"lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "max_norm": 1.1}


def _train(gen):
    args = llama3_torch.ModelArgs(**ARGS)
    model = llama3_torch.Transformer(args)
    model.init_weights(gen)
    tensors = {"in." + name: p.detach().clone() for name, p in model.named_parameters()}
    # Sequences following x[t + 1] = (5 x[t] + 3) mod vocab from random starts: a rule the model
    # learns within the 20 steps, so the run checks training that moves, not noise around ln(vocab).
    tokens = torch.empty(STEPS, BATCH, SEQ + 1, dtype=torch.int64)
    tokens[..., 0] = torch.randint(0, args.vocab_size, (STEPS, BATCH), generator=gen)
    for t in range(SEQ):
        tokens[..., t + 1] = (5 * tokens[..., t] + 3) % args.vocab_size
    inputs, targets = tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()
    tensors.update({"in.tokens": inputs, "in.targets": targets})

    opt = torch.optim.AdamW(model.parameters(), lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                            eps=HYPER["eps"], weight_decay=HYPER["weight_decay"])
    losses, norms = [], []
    for s in range(STEPS):
        opt.zero_grad()
        logits = model(inputs[s])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab_size), targets[s].reshape(-1))
        loss.backward()
        if s == 0:
            tensors["out.logits0"] = logits.detach()
            tensors.update({"grad." + name: p.grad.clone() for name, p in model.named_parameters()})
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), HYPER["max_norm"])))
        opt.step()
        losses.append(float(loss))
    tensors["out.loss"] = torch.tensor(losses, dtype=torch.float64)
    tensors["out.grad_norm"] = torch.tensor(norms, dtype=torch.float64)
    return tensors, dict(ARGS, **HYPER, steps=STEPS, rope_theta=args.rope_theta)


CASES = {"llama3_train_tiny": _train}
