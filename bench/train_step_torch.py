#!/usr/bin/env python3
"""One PyTorch round of bench/train_step.cpp: the Llama 3 twin (tests/parity/llama3_torch.py) trained
for a few steps in eager mode, timed and measured the way the titan round is.

Argument: a JSON file {"threads", "warmup", "steps", "seed", "config": {"dim", "n_layers",
"n_heads", "n_kv_heads", "ffn_dim", "vocab_size", "seq", "batch"}}. A step is the twin's forward ->
F.cross_entropy -> backward -> clip_grad_norm_ (max norm 1) -> torch.optim.AdamW step (foreach
left at its default; TorchTitan's lr, betas and weight decay), on one fixed random batch.

Memory is the resident set, read from /proc/self/status: the baseline before the model is built,
the high-water mark reset (clear_refs) after the warm-up steps, and the high-water mark after the
timed steps. Between init and the first step, gc and malloc_trim hand init's temporaries back, as
the titan round empties its allocator's cache.

Prints one JSON line on stdout: {"torch", "threads", "blas", "glibc_tunables", "foreach",
"step_seconds", "losses", "rss_baseline", "rss_peak"} (bytes), or {"error"}. Progress goes to stderr.
"""
import ctypes
import gc
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "parity"))
    sys.path.insert(0, HERE)
    from torch_reference import environment, reset_peak_rss, start_torch, status_bytes

    request, torch = start_torch()
    if torch is None:
        return 0
    import torch.nn.functional as F

    import llama3_torch

    c = request["config"]
    args = llama3_torch.ModelArgs(dim=c["dim"], n_layers=c["n_layers"], n_heads=c["n_heads"],
                                  n_kv_heads=c["n_kv_heads"], vocab_size=c["vocab_size"], ffn_dim=c["ffn_dim"],
                                  max_seq_len=c["seq"])
    gen = torch.Generator().manual_seed(int(request["seed"]))
    tokens = torch.randint(0, args.vocab_size, (c["batch"], c["seq"] + 1), generator=gen)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    libc = ctypes.CDLL("libc.so.6")
    rss_baseline = status_bytes("VmRSS")
    model = llama3_torch.Transformer(args)
    model.init_weights(gen)
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    gc.collect()
    libc.malloc_trim(0)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    losses, seconds = [], []
    for i in range(request["warmup"] + request["steps"]):
        if i == request["warmup"]:
            reset_peak_rss()
        start = time.perf_counter()
        losses.append(step())
        seconds.append(time.perf_counter() - start)
        print(f"torch  step {i + 1}: {seconds[-1] * 1e3:.0f} ms, loss {losses[-1]:.4f}", file=sys.stderr, flush=True)
    rss_peak = status_bytes("VmHWM")
    print(json.dumps({**environment(torch), "foreach": opt.param_groups[0]["foreach"],
                      "step_seconds": seconds[request["warmup"]:], "losses": losses,
                      "rss_baseline": rss_baseline, "rss_peak": rss_peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
