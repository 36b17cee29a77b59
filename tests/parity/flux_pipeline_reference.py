"""The reference of FLUX's text-to-image pipeline (tests/unit/test_flux_pipeline.cpp): diffusers'
FluxPipeline over a folder of tiny seeded components, with injected latents.

usage: flux_pipeline_reference.py --tokenizers DIR --out DIR
  --tokenizers  tests/tokenizer/make_flux_fixtures.py's output (as flux_encode_reference.py takes it)
Writes under --out (staged beside it and renamed into place):
  pipeline/     flux_encode_reference.py's folder (text_encoder/, tokenizer/, text_encoder_2/,
                tokenizer_2/, vae/ with 4 latent channels and a downscale of 2) plus transformer/ (a
                seeded FluxTransformer2DModel: patch 2, in_channels 16, 2 heads x 16, axes (4, 4, 8),
                1 double and 1 single block, joint and pooled widths 32 = T5's and CLIP's) and
                scheduler/ (FLUX.1's FlowMatchEulerDiscreteScheduler config)
  transformer_guidance/   the same transformer with guidance_embeds (flux-dev's shape)
  scheduler_schnell/      FLUX.1-schnell's scheduler config (no dynamic shifting, shift 1)
  reference.safetensors   "in.latents" [2, 256, 16] (packed noise for 2 images of 64 x 64) and
                FluxPipeline(..., output_type="pt") of PROMPTS from them after STEPS steps:
                "out.plain" (true_cfg_scale 1), "out.cfg" (true_cfg_scale CFG_SCALE with
                NEGATIVE), "out.guidance" (the guidance model at guidance_scale GUIDANCE),
                "out.schnell" (scheduler_schnell/), all [2, 3, 64, 64] in [0, 1]
The pipeline runs in float64 (PyTorch's float32 convolutions on this CPU differ from float64 by
1e-3 relative: flux_encode_reference.py), its outputs stored as float32.
"""
import sys
from pathlib import Path

import torch
from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flux_encode_reference import T5_LENGTH, build_pipeline, staged_main  # noqa: E402

PROMPTS = ["a red circle at the top left on a blue background", "a green square in the middle"]
NEGATIVE = "a yellow triangle"
STEPS = 4
SIZE = 64
CFG_SCALE = 3.0
GUIDANCE = 3.5


def transformer(guidance: bool) -> FluxTransformer2DModel:
    torch.manual_seed(3 if guidance else 4)
    model = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                   pooled_projection_dim=32, guidance_embeds=guidance, axes_dims_rope=[4, 4, 8]).eval()
    # Norm weights start at 1 and zero-initialised layers at 0, where a swap would go unseen.
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            base = 1.0 if "norm_" in name and name.endswith("weight") else 0.0
            p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
    return model


def build(tokenizers: Path, out: Path):
    pipeline_dir = out / "pipeline"
    clip_tok, t5_tok, clip, t5, vae = build_pipeline(tokenizers, pipeline_dir)
    # FluxPipeline pads CLIP's ids to model_max_length, which the fixture's tokenizer_config.json
    # leaves unset; titan pads to CLIP's max_position_embeddings.
    clip_tok.model_max_length = clip.config.max_position_embeddings
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True,
                                                base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
                                                max_image_seq_len=4096)
    scheduler.save_pretrained(pipeline_dir / "scheduler")
    # FLUX.1-schnell's: no shift.
    schnell = FlowMatchEulerDiscreteScheduler.from_config(scheduler.config, use_dynamic_shifting=False, shift=1.0)
    schnell.save_pretrained(out / "scheduler_schnell")
    plain, guided = transformer(False), transformer(True)
    plain.save_pretrained(pipeline_dir / "transformer")
    guided.save_pretrained(out / "transformer_guidance")

    latent = SIZE // 2  # the autoencoder's downscale is 2
    g = torch.Generator().manual_seed(6)
    latents = torch.randn(len(PROMPTS), (latent // 2) ** 2, 16, generator=g, dtype=torch.float64)

    def run(model, schedule=scheduler, **kwargs):
        pipe = FluxPipeline(scheduler=schedule, vae=vae, text_encoder=clip, tokenizer=clip_tok,
                            text_encoder_2=t5, tokenizer_2=t5_tok, transformer=model).to(torch.float64)
        with torch.no_grad():
            return pipe(PROMPTS, height=SIZE, width=SIZE, num_inference_steps=STEPS, latents=latents.clone(),
                        max_sequence_length=T5_LENGTH, output_type="pt", **kwargs).images

    reference = {"in.latents": latents,
                 "out.plain": run(plain),
                 "out.cfg": run(plain, negative_prompt=NEGATIVE, true_cfg_scale=CFG_SCALE),
                 "out.guidance": run(guided, guidance_scale=GUIDANCE),
                 "out.schnell": run(plain, schedule=schnell)}
    save_file({k: v.float().contiguous() for k, v in reference.items()}, str(out / "reference.safetensors"))


def main():
    staged_main(build, __doc__)


if __name__ == "__main__":
    main()
