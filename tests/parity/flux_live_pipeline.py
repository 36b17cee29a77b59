"""A diffusers FLUX folder whose encoders fit flux-tiny (src/titan/models/flux/model_args.cpp), for
training with the frozen encoders run every step (tests/unit/test_flux_live.cpp): T5 of d_model 64
(flux-tiny's context_in_dim), CLIP of hidden 32 (its vec_in_dim) and an autoencoder of 4 latent
channels that downsamples by 4, all tiny, seeded and untrained (flux_encode_reference.py's text
encoders, make_flux_shapes_pipeline.py's autoencoder shape). The test compares training on these
encoders run live with training on the cache `titan flux encode` writes with them, so the weights
only need to be fixed, not good.

usage: flux_live_pipeline.py --tokenizers DIR --out DIR
  --tokenizers  tests/tokenizer/make_flux_fixtures.py's output (its t5_sequence/ and clip/ folders)
Writes --out/pipeline/ (text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/, vae/), staged
beside --out and renamed into place.
"""
import sys
from pathlib import Path

import torch
from diffusers import AutoencoderKL

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
from flux_encode_reference import build_text_encoders, staged_main  # noqa: E402
from make_flux_shapes_pipeline import AUTOENCODER, CLIP_WIDTH, T5_WIDTH  # noqa: E402


def build(tokenizers: Path, out: Path):
    pipeline = out / "pipeline"
    build_text_encoders(tokenizers, pipeline, t5_width=T5_WIDTH, clip_width=CLIP_WIDTH)
    torch.manual_seed(3)
    # Not FLUX.1's scale and shift, so that a trainer reading the wrong ones is seen.
    AutoencoderKL(**AUTOENCODER, scaling_factor=0.5, shift_factor=0.25).eval().save_pretrained(pipeline / "vae")


if __name__ == "__main__":
    staged_main(build, __doc__)
