#!/usr/bin/env python3
"""One transformers round of bench/hf_decoders.py: the decoder a config.json describes, built by
its own transformers class (MistralForCausalLM, Gemma2ForCausalLM, ...) with transformers' own
initialisation, trained for a few steps as a PyTorch 2 user trains it, timed step by step.

Argument: a JSON file {"threads", "warmup", "steps", "seed", "config_json", "batch", "seq",
"variant", "attn_implementation"}. A step is model(input_ids, labels=..., shift_labels=...) (the
class's own loss: cross-entropy over the logits in float32) -> backward -> clip_grad_norm_ (max
norm 1) -> torch.optim.AdamW(fused=True where this build runs it on the CPU, else foreach) step,
with TorchTitan's lr, betas and weight decay, on one fixed random batch. The variant: "eager" or
"compile" (torch.compile(model), the whole model, default inductor backend, as a user on one
device compiles it; the first step compiles forward and backward, a warm-up step, so out of the
timings), with " bf16" the forward and loss under torch.autocast("cpu", dtype=torch.bfloat16).
attn_implementation is the class's ("sdpa" or "eager"); a class that refuses
the one asked for answers {"error"}.

Prints one JSON line on stdout: {environment(), "variant", "attn_implementation",
"architecture", "optimizer", "step_seconds", "first_step_seconds", "losses"}, or {"error"}.
Progress goes to stderr.
"""
import contextlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    sys.path.insert(0, HERE)
    from torch_reference import environment, make_adamw, start_torch

    request, torch = start_torch()
    if torch is None:
        return 0
    import transformers

    variant, attn = request["variant"], request["attn_implementation"]
    config = transformers.AutoConfig.from_pretrained(os.path.dirname(request["config_json"]))
    gen = torch.Generator().manual_seed(int(request["seed"]))
    tokens = torch.randint(0, config.vocab_size, (request["batch"], request["seq"] + 1), generator=gen)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    try:
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=torch.float32)
    except (ValueError, ImportError) as e:
        print(json.dumps({"error": f"{config.model_type} with attn_implementation={attn!r}: {e}"}))
        return 0
    architecture = type(model).__name__
    model.train()
    if variant.startswith("compile"):
        # The parameters stay the module's own: the optimizer and clipping below see the same ones.
        model = torch.compile(model)
    opt, optimizer = make_adamw(torch, model.parameters(), compiled=False, lr=8e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1)
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if variant.endswith("bf16")
                else contextlib.nullcontext())

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = model(input_ids=inputs, labels=labels, shift_labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    losses, seconds = [], []
    for i in range(request["warmup"] + request["steps"]):
        start = time.perf_counter()
        losses.append(step())
        seconds.append(time.perf_counter() - start)
        print(f"{architecture} {variant} ({attn}) step {i + 1}: {seconds[-1] * 1e3:.0f} ms, loss {losses[-1]:.4f}",
              file=sys.stderr, flush=True)
    print(json.dumps({**environment(torch), "transformers": transformers.__version__, "variant": variant,
                      "attn_implementation": attn, "architecture": architecture, "optimizer": optimizer,
                      "step_seconds": seconds[request["warmup"]:], "first_step_seconds": seconds[0],
                      "losses": losses}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
