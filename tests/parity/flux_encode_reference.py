"""The reference of `titan flux encode` (tests/unit/test_flux_encode.cpp): a diffusers FLUX folder
of tiny seeded components and what diffusers' FluxPipeline would make of a shapes data set with it.

usage: flux_encode_reference.py --tokenizers DIR --out DIR
  --tokenizers  tests/tokenizer/make_flux_fixtures.py's output (its t5_sequence/ and clip/ folders:
                FLUX.1's own tokenizer layouts, with a real Precompiled charsmap and CLIP's vocabulary)
Writes under --out (staged beside it and renamed into place):
  pipeline/     text_encoder/ (CLIPTextModel), tokenizer/, text_encoder_2/ (T5EncoderModel),
                tokenizer_2/, vae/ (AutoencoderKL with FLUX's block types, no quant convs)
  data/         6 shapes images (64 px, so that no resize is involved) with their captions
  expected.safetensors  per sample, in name order: t5 [n, 32, d], clip_pooled [n, d'], latent_mean
                and latent_logvar [n, 4, 32, 32]; and the empty caption's t5 / clip_pooled
                (empty_t5, empty_clip_pooled)
The text side is FluxPipeline._get_t5_prompt_embeds / _get_clip_prompt_embeds: padding to
max_length, truncation, no attention masks; the image side AutoencoderKL.encode's latent_dist; all
computed in float64.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import AutoTokenizer, CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from autoencoder_reference import new_model as autoencoder_model  # noqa: E402
from text_encoders_reference import randomize  # noqa: E402
T5_LENGTH = 32
COUNT = 6


def build_text_encoders(tokenizers: Path, pipeline: Path, t5_width: int = 32, clip_width: int = 32):
    """The tiny seeded text encoders and FLUX.1's tokenizer layouts, saved under `pipeline` as
    tokenizer/, text_encoder/ (CLIP, hidden `clip_width`), tokenizer_2/ and text_encoder_2/ (T5,
    d_model `t5_width`); returns (clip_tok, t5_tok, clip, t5). The weights are random: they still
    map different captions to different encodings (scripts/make_flux_shapes_pipeline.py uses them
    so)."""
    shutil.copytree(tokenizers / "clip", pipeline / "tokenizer")
    shutil.copytree(tokenizers / "t5_sequence", pipeline / "tokenizer_2")
    clip_tok = AutoTokenizer.from_pretrained(pipeline / "tokenizer")
    t5_tok = AutoTokenizer.from_pretrained(pipeline / "tokenizer_2")

    torch.manual_seed(0)
    clip = CLIPTextModel(CLIPTextConfig(hidden_size=clip_width, intermediate_size=37, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=77,
                                        vocab_size=len(clip_tok), eos_token_id=clip_tok.eos_token_id,
                                        bos_token_id=clip_tok.bos_token_id, pad_token_id=clip_tok.pad_token_id,
                                        hidden_act="quick_gelu")).eval()
    randomize(clip, 1)
    t5 = T5EncoderModel(T5Config(d_model=t5_width, d_ff=37, d_kv=8, num_layers=2, num_heads=4,
                                 relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                 feed_forward_proj="gated-gelu", vocab_size=len(t5_tok),
                                 layer_norm_epsilon=1e-6)).eval()
    randomize(t5, 2)
    clip.save_pretrained(pipeline / "text_encoder")
    t5.save_pretrained(pipeline / "text_encoder_2")
    return clip_tok, t5_tok, clip, t5


def build_pipeline(tokenizers: Path, pipeline: Path):
    """The tiny seeded components, saved under `pipeline` in diffusers' FLUX layout; returns
    (clip_tok, t5_tok, clip, t5, vae). tests/parity/flux_pipeline_reference.py adds the transformer."""
    clip_tok, t5_tok, clip, t5 = build_text_encoders(tokenizers, pipeline)
    vae = autoencoder_model()
    vae.save_pretrained(pipeline / "vae")
    return clip_tok, t5_tok, clip, t5, vae


def build(tokenizers: Path, out: Path):
    clip_tok, t5_tok, clip, t5, vae = build_pipeline(tokenizers, out / "pipeline")

    subprocess.run([sys.executable, str(ROOT / "scripts/make_shapes.py"), "make", "--out", str(out / "data"),
                    "--count", str(COUNT), "--size", "64"], check=True, stdout=subprocess.DEVNULL)
    stems = sorted(p.stem for p in (out / "data").glob("*.png"))
    # titan drops a caption's trailing whitespace, as editors add a newline.
    captions = [(out / "data" / f"{s}.txt").read_text().rstrip() for s in stems]
    images = np.stack([np.asarray(Image.open(out / "data" / f"{s}.png").convert("RGB")) for s in stems])
    images = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255 * 2 - 1

    def encode_text(texts):
        t5_ids = t5_tok(texts, padding="max_length", max_length=T5_LENGTH, truncation=True,
                        return_tensors="pt").input_ids
        clip_ids = clip_tok(texts, padding="max_length", max_length=77, truncation=True,
                            return_tensors="pt").input_ids
        return t5(t5_ids)[0], clip(clip_ids).pooler_output

    # In float64, stored as float32: PyTorch's float32 convolutions on this CPU (oneDNN) differ from
    # float64 by 1.4e-3 relative on these latents (measured), titan's by 3.5e-6.
    clip.double()
    t5.double()
    vae.double()
    with torch.no_grad():
        t5_hidden, pooled = encode_text(captions)
        empty_t5, empty_pooled = encode_text([""])
        dist = vae.encode(images.double()).latent_dist
    expected = {"t5": t5_hidden, "clip_pooled": pooled, "latent_mean": dist.mean, "latent_logvar": dist.logvar,
                "empty_t5": empty_t5, "empty_clip_pooled": empty_pooled}
    save_file({k: v.float().contiguous() for k, v in expected.items()}, str(out / "expected.safetensors"))


def staged_main(build_into, doc):
    """The command line of a reference that builds from --tokenizers into --out: staged beside
    --out and renamed into place, so that a reader never sees half of it."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizers", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=args.out.name + ".", dir=args.out.parent))
    try:
        build_into(args.tokenizers, staging)
        shutil.rmtree(args.out, ignore_errors=True)
        os.rename(staging, args.out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main():
    staged_main(build, __doc__)


if __name__ == "__main__":
    main()
