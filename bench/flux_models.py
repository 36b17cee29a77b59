#!/usr/bin/env python3
"""The PyTorch side of bench/flux_train_step.cpp: diffusers' FluxTransformer2DModel trained for a
few steps as a PyTorch 2 user trains it, on CPU-sized configs.

Argument: a JSON file {"threads", "warmup", "steps", "seed", "variants", "configs": [{"name",
"hidden", "heads", "depth", "depth_single", "in_channels", "context_in_dim", "vec_in_dim",
"axes_dim", "batch", "latent_size", "patch", "txt_tokens"}]}. A step is: x_t = (1 - t) x0 + t noise
-> the model's velocity -> mean((v - (noise - x0))^2) -> backward -> clip_grad_norm_ at 1 -> AdamW
step (fused where this build runs it on the CPU, else foreach; bench/torch_reference.py make_adamw),
on one fixed batch with fixed timesteps. Variants (bench/torch_reference.py VARIANTS): "compile"
wraps the model with torch.compile(model) (default inductor backend; the first steps compile forward
and backward: warm-up steps); "bf16" runs the forward and the loss under torch.autocast("cpu",
torch.bfloat16).

Prints one JSON line on stdout in bench/torch_reference.py's form: {environment(), "results": {name:
{variant: {"seconds" (median step), "first_call_seconds", "impl"} or {"error"}}}, "diffusers"}.
Progress goes to stderr.
"""
import contextlib
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build(c, torch):
    from diffusers import FluxTransformer2DModel

    head_dim = c["hidden"] // c["heads"]
    model = FluxTransformer2DModel(patch_size=1, in_channels=c["in_channels"], num_layers=c["depth"],
                                   num_single_layers=c["depth_single"], attention_head_dim=head_dim,
                                   num_attention_heads=c["heads"], joint_attention_dim=c["context_in_dim"],
                                   pooled_projection_dim=c["vec_in_dim"], guidance_embeds=False,
                                   axes_dims_rope=tuple(c["axes_dim"]))
    return model.train()


def batch(c, torch, gen):
    side = c["latent_size"] // c["patch"]
    img_len, b = side * side, c["batch"]
    img_ids = torch.zeros(side, side, 3)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    return {"x0": torch.randn(b, img_len, c["in_channels"], generator=gen),
            "noise": torch.randn(b, img_len, c["in_channels"], generator=gen),
            "txt": torch.randn(b, c["txt_tokens"], c["context_in_dim"], generator=gen),
            "y": torch.randn(b, c["vec_in_dim"], generator=gen),
            "t": torch.rand(b, generator=gen),
            "img_ids": img_ids.reshape(img_len, 3), "txt_ids": torch.zeros(c["txt_tokens"], 3)}


def run_variant(c, variant, request, torch):
    from torch_reference import make_adamw

    gen = torch.Generator().manual_seed(int(request["seed"]))
    model = build(c, torch)
    data = batch(c, torch, gen)
    forward = torch.compile(model) if variant.startswith("compile") else model
    opt, optimizer = make_adamw(torch, model.parameters(), compiled=False, lr=1e-4, weight_decay=0.0)
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if variant.endswith("bf16")
                else contextlib.nullcontext())
    t = data["t"][:, None, None]
    target = data["noise"] - data["x0"]

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast:
            x_t = (1 - t) * data["x0"] + t * data["noise"]
            v = forward(hidden_states=x_t, encoder_hidden_states=data["txt"], pooled_projections=data["y"],
                        timestep=data["t"], img_ids=data["img_ids"], txt_ids=data["txt_ids"], return_dict=False)[0]
            loss = torch.mean((v.float() - target) ** 2)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    seconds = []
    for i in range(request["warmup"] + request["steps"]):
        start = time.perf_counter()
        loss = step()
        seconds.append(time.perf_counter() - start)
        print(f"torch  {c['name']} [{variant}] step {i + 1}: {seconds[-1] * 1e3:.0f} ms, loss {loss:.4f}",
              file=sys.stderr, flush=True)
    compiled = "torch.compile(model); " if variant.startswith("compile") else ""
    return {"seconds": statistics.median(seconds[request["warmup"]:]), "first_call_seconds": seconds[0],
            "impl": compiled + optimizer}


def main():
    sys.path.insert(0, HERE)
    from torch_reference import diffusers_main

    return diffusers_main("configs", run_variant)


if __name__ == "__main__":
    sys.exit(main())
