"""The training reference: a transformers model trained for STEPS steps with torch.optim.AdamW and
clip_grad_norm_, from random weights (transformers' own init) written by save_pretrained, which
titan imports and trains through its own trainer step.

Writes, under the family's folder: train/initial (the weights before the first step) and
train.safetensors with the batches ("in.tokens", "in.targets" [STEPS, BATCH, SEQ]), the first
step's logits ("out.logits0") and gradients ("grad.<HF name>", as save_pretrained names and lays
out tensors), every step's loss and grad norm before clipping ("out.loss", "out.grad_norm") and
the weights after the last step ("final.<HF name>"); the same run in float64 ("out.f64_loss",
"out.f64_grad_norm", "final_f64.<HF name>"); metadata: the optimizer's settings.

The same run from the same weights with forward and loss under torch.autocast("cpu", bfloat16),
PyTorch's mixed precision (float32 weights and optimizer, bf16 matrix products and activations),
gives "out.bf16_loss" and "out.bf16_grad_norm": the reference of titan's
training.mixed_precision_param = "bfloat16".
"""
import copy
import os

import torch

from hf_families import as_saved, new_model
from make_reference import write_safetensors

STEPS = 10
BATCH = 2
SEQ = 32
# Grad norms run from about 1.6 to 8 over the run, so max_norm 2.5 clips some steps and not others.
# eps 1e-6 rather than 1e-8: a gradient that is rounding alone (a key bias, to which softmax is
# blind: some 1e-9) would otherwise move its weight by a whole lr per step in the direction of the
# rounding, which differs between GEMM kernels; with 1e-8, Qwen 2's run fell 2e-4 away from the
# float64 one at step 8 under OpenBLAS's AVX kernels and not under its SSE3 ones.
HYPER = {"lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-6, "weight_decay": 0.1, "max_norm": 2.5}
# Qwen 3 MoE trains with HF's load-balancing loss: the loss below includes
# router_aux_loss_coef * aux_loss, and the training folder's config.json carries the coefficient,
# which titan's import reads; titan computes the same loss ([moe] load_balance_loss = "global").
HF_AUX_LOSS = True


def batches(vocab, gen):
    """Sequences following x[t + 1] = (5 x[t] + 3) mod vocab from random starts: a rule the model
    learns within the steps, so the run checks training that moves, not noise around ln(vocab)."""
    tokens = torch.empty(STEPS, BATCH, SEQ + 1, dtype=torch.int64)
    tokens[..., 0] = torch.randint(0, vocab, (STEPS, BATCH), generator=gen)
    for t in range(SEQ):
        tokens[..., t + 1] = (5 * tokens[..., t] + 3) % vocab
    return tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()


def run(model, inputs, targets, dtype, tensors):
    """STEPS steps; forward and loss under autocast to `dtype` unless it is float32. With
    `tensors`, records the first step's logits and gradients there."""
    opt = torch.optim.AdamW(model.parameters(), lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                            eps=HYPER["eps"], weight_decay=HYPER["weight_decay"])
    losses, norms = [], []
    for s in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            # shift_labels: the targets are already the next tokens (HF would shift labels itself).
            out = model(inputs[s], labels=targets[s], shift_labels=targets[s])
        out.loss.backward()
        if s == 0 and tensors is not None:
            tensors["out.logits0"] = out.logits.detach()
            # Copies: clip_grad_norm_ below scales the gradients in place.
            grads = as_saved(model, {n: p.grad.clone() for n, p in model.named_parameters()})
            tensors.update({"grad." + n: g for n, g in grads.items()})
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), HYPER["max_norm"])))
        opt.step()
        losses.append(out.loss.item())
    return losses, norms


def train(family, root):
    torch.manual_seed(7)
    moe = {"output_router_logits": HF_AUX_LOSS, "router_aux_loss_coef": 0.01 if HF_AUX_LOSS else 0.0}
    model = new_model(family, **(moe if family == "qwen3_moe" else {})).train()
    model.save_pretrained(os.path.join(root, "train", "initial"))
    inputs, targets = batches(model.config.vocab_size, torch.Generator().manual_seed(99))
    tensors = {"in.tokens": inputs, "in.targets": targets}

    initial = copy.deepcopy(model)
    # torch's grouped expert matmul takes no float64: the MoE run has no exact twin.
    moe_model = any(getattr(model.config, k, None) for k in ("num_experts", "num_local_experts"))
    exact = None if moe_model else copy.deepcopy(model).double()
    losses, norms = run(model, inputs, targets, torch.float32, tensors)
    final = as_saved(model, dict(model.named_parameters()))
    tensors.update({"final." + n: t for n, t in final.items()})
    tensors["out.loss"] = torch.tensor(losses, dtype=torch.float64)
    tensors["out.grad_norm"] = torch.tensor(norms, dtype=torch.float64)
    # The same run in float64: how far float32 rounding alone moves each figure, which a run as
    # exact as PyTorch's float32 one stays within.
    if exact is not None:
        losses, norms = run(exact, inputs, targets, torch.float32, None)
        tensors["out.f64_loss"] = torch.tensor(losses, dtype=torch.float64)
        tensors["out.f64_grad_norm"] = torch.tensor(norms, dtype=torch.float64)
        final = as_saved(exact, dict(exact.named_parameters()))
        tensors.update({"final_f64." + n: t for n, t in final.items()})
    losses, norms = run(initial, inputs, targets, torch.bfloat16, None)
    tensors["out.bf16_loss"] = torch.tensor(losses, dtype=torch.float64)
    tensors["out.bf16_grad_norm"] = torch.tensor(norms, dtype=torch.float64)
    write_safetensors(os.path.join(root, "train.safetensors"), tensors, dict(HYPER, steps=STEPS))
