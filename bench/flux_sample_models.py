#!/usr/bin/env python3
"""The pipeline folder of bench/flux_sample.cpp and its sanity reference (nothing is downloaded).

The folder is scripts/make_flux_shapes_pipeline.py's (docs/flux.md's shapes set) but for the
autoencoder, which is not trained here: the same config (make_flux_shapes_pipeline.AUTOENCODER),
seeded random weights, FLUX.1's scaling and shift factors. The text encoders, tokenizers,
transformer (flux-tiny's shape) and scheduler are that script's own (write_untrained_parts), the
tokenizers made by tests/tokenizer/make_flux_fixtures.py. Random weights do not change the work.

Argument: a JSON file {"dir", "threads", "seed", "prompts", "size", "steps", "t5_tokens"}. Writes
  DIR/pipeline/           vae/, text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/,
                          transformer/, scheduler/
  DIR/reference.safetensors  "latents": packed noise [prompts, (size / 8)^2, 16] from
                          Generator(seed), and "images": diffusers' FluxPipeline in f32, eager,
                          on them (output_type "pt", [prompts, 3, size, size] in [0, 1])
and prints one JSON line {"pipeline", "reference", "torch", "diffusers", "transformers"}, or
{"error"}. Progress goes to stderr.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# FLUX.1's autoencoder factors: latents / scaling_factor + shift_factor before decoding.
SCALING_FACTOR, SHIFT_FACTOR = 0.3611, 0.1159


def write_folder(request, pipeline, torch):
    from diffusers import AutoencoderKL
    from make_flux_shapes_pipeline import AUTOENCODER, write_untrained_parts

    tokenizers = Path(request["dir"]) / "tokenizers"
    subprocess.run([sys.executable, str(ROOT / "tests/tokenizer/make_flux_fixtures.py"), "--out", str(tokenizers)],
                   check=True, stdout=subprocess.DEVNULL, cwd=ROOT / "tests/tokenizer")
    torch.manual_seed(request["seed"])
    AutoencoderKL(**AUTOENCODER, sample_size=request["size"], scaling_factor=SCALING_FACTOR,
                  shift_factor=SHIFT_FACTOR).save_pretrained(pipeline / "vae")
    write_untrained_parts(tokenizers, pipeline, request["seed"])


def load_pipeline(folder, torch, dtype):
    """diffusers' FluxPipeline over the folder's components, each loaded by its own from_pretrained
    in `dtype` (the folder has no model_index.json, which FluxPipeline.from_pretrained reads)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import AutoTokenizer, CLIPTextModel, T5EncoderModel

    folder = Path(folder)
    return FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(folder / "scheduler"),
                        vae=AutoencoderKL.from_pretrained(folder / "vae", torch_dtype=dtype),
                        text_encoder=CLIPTextModel.from_pretrained(folder / "text_encoder", torch_dtype=dtype),
                        tokenizer=AutoTokenizer.from_pretrained(folder / "tokenizer"),
                        text_encoder_2=T5EncoderModel.from_pretrained(folder / "text_encoder_2", torch_dtype=dtype),
                        tokenizer_2=AutoTokenizer.from_pretrained(folder / "tokenizer_2"),
                        transformer=FluxTransformer2DModel.from_pretrained(folder / "transformer", torch_dtype=dtype))


def packed_noise(pipe, count, size, seed, torch):
    """Standard normal latents as FluxPipeline takes them: [count, tokens, 4 x latent channels]."""
    side = size // pipe.vae_scale_factor // 2
    channels = pipe.transformer.config.in_channels
    return torch.randn(count, side * side, channels, generator=torch.Generator().manual_seed(seed))


def main():
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT / "scripts"))
    from torch_reference import start_torch

    request, torch = start_torch()
    if torch is None:
        return 0
    try:
        import diffusers
        import transformers
        from safetensors.torch import save_file
    except ImportError as e:
        print(json.dumps({"error": f"cannot import diffusers, transformers and safetensors with {sys.executable}: "
                                   f"{e}"}))
        return 0
    pipeline = Path(request["dir"]) / "pipeline"
    try:
        write_folder(request, pipeline, torch)
        pipe = load_pipeline(pipeline, torch, torch.float32)
        latents = packed_noise(pipe, len(request["prompts"]), request["size"], request["seed"], torch)
        images = pipe(request["prompts"], height=request["size"], width=request["size"],
                      num_inference_steps=request["steps"], latents=latents.clone(),
                      max_sequence_length=request["t5_tokens"], output_type="pt").images
    except Exception as e:  # noqa: BLE001 -- any failure leaves no folder to time; the caller says why
        print(json.dumps({"error": f"{type(e).__name__}: {str(e)[:800]}"}))
        return 0
    reference = os.path.join(request["dir"], "reference.safetensors")
    save_file({"latents": latents.contiguous(), "images": images.float().contiguous()}, reference)
    print(json.dumps({"pipeline": str(pipeline), "reference": reference, "torch": torch.__version__,
                      "diffusers": diffusers.__version__, "transformers": transformers.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
