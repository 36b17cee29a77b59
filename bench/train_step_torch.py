#!/usr/bin/env python3
"""One PyTorch round of bench/train_step.cpp: Llama 3 (bench/llama3_torch.py, TorchTitan's model)
trained for a few steps as a PyTorch 2 user trains it, timed and measured the way the titan round is.

Argument: a JSON file {"threads", "warmup", "steps", "seed", "variant", "config": {"dim",
"n_layers", "n_heads", "n_kv_heads", "ffn_dim", "vocab_size", "seq", "batch"}}. A step is the
model's forward -> F.cross_entropy -> backward -> clip_grad_norm_ (max norm 1) ->
torch.optim.AdamW(fused=True where this build runs it on the CPU, else foreach) step, with
TorchTitan's lr, betas and weight decay, on one fixed random batch. The variant (the names of
kTrainStepTorch in bench/train_step.cpp) decides the rest: "compile" compiles each transformer
block with torch.compile(fullgraph=True) as TorchTitan does (it compiles per block so that FSDP can
wrap each); "compile model" compiles the whole model with torch.compile(model), as a user training
on one device does (one graph for the forward, one for the backward: embedding, every block, the
final norm and the output head); both use the default inductor backend, and the first step
compiles forward and backward, a warm-up step, so out of the timings; "bf16" runs forward and loss
under torch.autocast(device, dtype=torch.bfloat16). "device" (default "cpu"; "cuda" for
bench_train_step --device=cuda) is where the model, the batch and the optimizer live; the model is
initialised on the CPU first, so that both devices start from the same weights.

Memory is the resident set, read from /proc/self/status: the baseline before the model is built,
the high-water mark reset (clear_refs) after the warm-up steps, and the high-water mark after the
timed steps. Between init and the first step, gc and malloc_trim hand init's temporaries back, as
the titan round empties its allocator's cache.

Prints one JSON line on stdout: {environment(), "variant", "optimizer", "compile", "step_seconds",
"first_step_seconds", "losses", "rss_baseline", "rss_peak"} (bytes), or {"error"}. Progress goes
to stderr.
"""
import contextlib
import ctypes
import gc
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    sys.path.insert(0, HERE)
    from torch_reference import environment, make_adamw, reset_peak_rss, start_torch, status_bytes

    request, torch = start_torch()
    if torch is None:
        return 0
    import torch.nn.functional as F

    import llama3_torch

    c, variant, device = request["config"], request["variant"], request.get("device", "cpu")
    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        print(json.dumps({"error": f"device cuda requested, but torch {torch.__version__} sees no CUDA device"}))
        return 0
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
    model.to(device)
    inputs, labels = inputs.to(device), labels.to(device)
    compiled = ""
    if variant.startswith("compile model"):
        # The parameters stay the module's own: the optimizer and clipping below see the same ones.
        model = torch.compile(model)
        compiled = "torch.compile(model), the whole model"
    elif variant.startswith("compile"):
        for i, block in enumerate(model.layers):
            model.layers.register_module(str(i), torch.compile(block, fullgraph=True))
        compiled = "torch.compile(block, fullgraph=True) per transformer block"
    opt, optimizer = make_adamw(torch, model.parameters(), compiled=False, lr=8e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1)
    autocast = (torch.autocast(device, dtype=torch.bfloat16) if variant.endswith("bf16")
                else contextlib.nullcontext())
    gc.collect()
    libc.malloc_trim(0)

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast:
            logits = model(inputs)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
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
        print(f"torch {variant}  step {i + 1}: {seconds[-1] * 1e3:.0f} ms, loss {losses[-1]:.4f}", file=sys.stderr,
              flush=True)
    rss_peak = status_bytes("VmHWM")
    # Over the whole run, as JAX's and titan's device peaks are: every step reaches the same peak.
    on_device = {"device_name": torch.cuda.get_device_name(), "device_peak_bytes": torch.cuda.max_memory_allocated()
                 } if cuda else {}
    print(json.dumps({**environment(torch), **on_device, "variant": variant, "optimizer": optimizer,
                      "compile": compiled,
                      "step_seconds": seconds[request["warmup"]:], "first_step_seconds": seconds[0],
                      "losses": losses, "rss_baseline": rss_baseline, "rss_peak": rss_peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
