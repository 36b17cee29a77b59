"""Reference cases for Qwen 3: tiny dense (tied embeddings) and MoE models trained for 10 steps by
the PyTorch twin in qwen3_torch.py with torch.optim.AdamW and grad-norm clipping.

Each case owns the initial weights (its own generator, TorchTitan's init) and the token batches;
titan loads both by TorchTitan's names and must reproduce the first step's logits and gradients
and every step's loss (the router's auxiliary loss included) and grad norm. The MoE case runs with
both balancing methods on, so the auxiliary loss and the expert-bias update are checked, the
latter through the biases after the last step.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_torch  # noqa: E402

STEPS = 10
BATCH = 2
SEQ = 32
# head_dim 24 with 4 heads of a 64-wide stream: not dim / n_heads, as in every released size.
COMMON = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=24, ffn_dim=96, vocab_size=256,
              max_seq_len=SEQ, rope_theta=1000000.0, norm_eps=1e-6)
MOE = dict(num_experts=8, top_k=2, hidden_dim=32, norm_topk_prob=True, load_balance_bias=True,
           bias_update_rate=0.01)
HYPER = {"lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "max_norm": 1.0}


def _train(gen, args, meta):
    model = qwen3_torch.Transformer(args)
    model.init_weights(gen)
    tensors = {"in." + name: t.detach().clone() for name, t in model.state_dict().items()}
    # Sequences following x[t + 1] = (5 x[t] + 3) mod vocab from random starts: a rule the model
    # learns within the steps, so the run checks training that moves, not noise around ln(vocab).
    tokens = torch.empty(STEPS, BATCH, SEQ + 1, dtype=torch.int64)
    tokens[..., 0] = torch.randint(0, args.vocab_size, (STEPS, BATCH), generator=gen)
    for t in range(SEQ):
        tokens[..., t + 1] = (5 * tokens[..., t] + 3) % args.vocab_size
    inputs, targets = tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()
    tensors.update({"in.tokens": inputs, "in.targets": targets})

    opt = torch.optim.AdamW(model.parameters(), lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                            eps=HYPER["eps"], weight_decay=HYPER["weight_decay"])
    losses, aux_losses, norms = [], [], []
    for s in range(STEPS):
        opt.zero_grad()
        logits = model(inputs[s])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab_size), targets[s].reshape(-1))
        if model.aux_loss is not None:
            aux_losses.append(float(model.aux_loss))
            loss = loss + model.aux_loss
        loss.backward()
        if s == 0:
            tensors["out.logits0"] = logits.detach()
            tensors.update({"grad." + name: p.grad.clone() for name, p in model.named_parameters()})
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), HYPER["max_norm"])))
        opt.step()
        if args.moe is not None:
            model.end_step(model.tokens_per_expert)
        losses.append(float(loss))
    tensors["out.loss"] = torch.tensor(losses, dtype=torch.float64)
    tensors["out.grad_norm"] = torch.tensor(norms, dtype=torch.float64)
    if aux_losses:
        tensors["out.aux_loss"] = torch.tensor(aux_losses, dtype=torch.float64)
    for name, b in model.named_buffers():
        if name.endswith("expert_bias"):
            tensors["out.final." + name] = b.clone()
    return tensors, dict(COMMON, **HYPER, **meta, steps=STEPS)


def _dense(gen):
    args = qwen3_torch.ModelArgs(**COMMON, tie_embeddings=True)
    return _train(gen, args, {"tie_embeddings": 1})


def _moe(gen):
    args = qwen3_torch.ModelArgs(**COMMON, moe=qwen3_torch.MoEArgs(**MOE), aux_loss_coeff=0.1)
    return _train(gen, args, dict({k: int(v) if isinstance(v, bool) else v for k, v in MOE.items()},
                                  tie_embeddings=0, aux_loss_coeff=0.1))


CASES = {"qwen3_dense_train_tiny": _dense, "qwen3_moe_train_tiny": _moe}
