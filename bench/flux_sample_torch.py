#!/usr/bin/env python3
"""The PyTorch side of bench/flux_sample.cpp: diffusers' FluxPipeline making images from prompts,
as a PyTorch 2 user runs it, over the folder bench/flux_sample_models.py wrote.

Argument: a JSON file {"threads", "warmup", "reps", "seed", "variants", "pipeline", "prompts",
"steps", "t5_tokens", "cases": [{"name", "size"}]}. A call is FluxPipeline(prompts, height=size,
width=size, num_inference_steps=steps, max_sequence_length=t5_tokens, generator=Generator(seed),
output_type="pt"): both text encoders, every Euler step and the autoencoder's decode; loading is
left out. Variants (bench/torch_reference.py VARIANTS): "compile" replaces pipe.transformer by
torch.compile(pipe.transformer) (default inductor backend; the warm-up call compiles); "bf16"
loads every model with torch_dtype=torch.bfloat16, diffusers' documented way of running FLUX in
bf16. The other way, the call under torch.autocast("cpu", dtype=torch.bfloat16) over f32 models,
was as fast or slower: eager, 1 thread, Xeon with AMX, 2026-12-07: 0.49-0.69 s a call against
0.45-0.48 s at 64 px, 0.94-1.29 s against 0.87-0.89 s at 128 px.

Prints one JSON line on stdout in bench/torch_reference.py's form: {environment(), "results": {name:
{variant: {"seconds" (median call), "first_call_seconds", "impl"} or {"error"}}}, "diffusers"}.
Progress goes to stderr.
"""
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_variant(case, variant, request, torch):
    from flux_sample_models import load_pipeline

    bf16 = variant.endswith("bf16")
    pipe = load_pipeline(request["pipeline"], torch, torch.bfloat16 if bf16 else torch.float32)
    pipe.set_progress_bar_config(disable=True)
    if variant.startswith("compile"):
        pipe.transformer = torch.compile(pipe.transformer)

    def call():
        return pipe(request["prompts"], height=case["size"], width=case["size"],
                    num_inference_steps=request["steps"], max_sequence_length=request["t5_tokens"],
                    generator=torch.Generator().manual_seed(request["seed"]), output_type="pt").images

    seconds = []
    for i in range(request["warmup"] + request["reps"]):
        start = time.perf_counter()
        images = call()
        seconds.append(time.perf_counter() - start)
        print(f"torch  {case['name']} [{variant}] call {i + 1}: {seconds[-1]:.2f} s, {tuple(images.shape)}",
              file=sys.stderr, flush=True)
    impl = ("torch.compile(pipe.transformer); " if variant.startswith("compile") else "") + (
        "models in bf16" if bf16 else "f32")
    return {"seconds": statistics.median(seconds[request["warmup"]:]), "first_call_seconds": seconds[0],
            "impl": impl}


def main():
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent / "scripts"))
    from torch_reference import diffusers_main

    return diffusers_main("cases", run_variant)


if __name__ == "__main__":
    sys.exit(main())
