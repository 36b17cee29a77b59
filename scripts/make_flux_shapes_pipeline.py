#!/usr/bin/env python3
"""A diffusers FLUX folder for the bundled shapes set (scripts/make_shapes.py), made here because
no pretrained FLUX component can be downloaded: `titan flux encode`, `titan train` with
configs/flux/flux_tiny.toml and `titan generate --pipeline` then run on it (docs/flux.md, "Train
FLUX on the shapes set"). Run with the venv's python (torch, transformers, diffusers).

usage: make_flux_shapes_pipeline.py --out DIR [--tokenizers DIR] [--size 64] [--steps 4000]
                                    [--seed 0] [--threads 1]
Writes DIR (staged beside it and renamed into place):
  vae/            diffusers' AutoencoderKL with FLUX's block types and no quant convs, 4 latent
                  channels, downscale 4, TRAINED here on shapes images (pixel MSE + L1 of a posterior
                  sample plus a small KL term); scaling_factor and shift_factor from the latents'
                  mean and standard deviation over the training images
  text_encoder/   CLIPTextModel, hidden 32 (flux-tiny's vec_in_dim), and tokenizer/ (CLIP's BPE)
  text_encoder_2/ T5EncoderModel, d_model 64 (flux-tiny's context_in_dim), and tokenizer_2/
                  (a SentencePiece Unigram model); both encoders have RANDOM seeded weights
                  (tests/parity/flux_encode_reference.py's builder): they are not trained, yet
                  they map different captions to different encodings, which is all the
                  transformer needs to learn the caption -> image map of this data set
  transformer/    a seeded FluxTransformer2DModel of flux-tiny's shape (models/flux/model_args.cpp):
                  the starting point; `titan generate --checkpoint` replaces its weights
  scheduler/      FlowMatchEulerDiscreteScheduler, unshifted (FLUX.1-schnell's: shift 1)
The autoencoder's round trip decode(encode(image)) of held-out shapes images is scored by
make_shapes.py's checker and printed; the script fails below 95% on any of colour, shape and
background. Everything is seeded; the autoencoder's training takes a few minutes on 2 cores.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "parity"))
import make_shapes  # noqa: E402
from flux_encode_reference import build_text_encoders  # noqa: E402

# flux-tiny (src/titan/models/flux/model_args.cpp): hidden 128 = 4 heads x 32, axes (8, 12, 12),
# context 64 (T5's d_model), pooled 32 (CLIP's hidden), 16 input channels = 4 latent x 2 x 2.
T5_WIDTH, CLIP_WIDTH, LATENT_CHANNELS = 64, 32, 4
TRANSFORMER = dict(patch_size=1, in_channels=4 * LATENT_CHANNELS, num_layers=2, num_single_layers=2,
                   attention_head_dim=32, num_attention_heads=4, joint_attention_dim=T5_WIDTH,
                   pooled_projection_dim=CLIP_WIDTH, guidance_embeds=False, axes_dims_rope=[8, 12, 12])
# Three levels: two stride-2 downsamplings, so a 64 px image is a 16 x 16 latent (64 tokens packed).
AUTOENCODER = dict(in_channels=3, out_channels=3, latent_channels=LATENT_CHANNELS,
                   down_block_types=["DownEncoderBlock2D"] * 3, up_block_types=["UpDecoderBlock2D"] * 3,
                   block_out_channels=[8, 16, 32], layers_per_block=1, norm_num_groups=2,
                   use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=True)
KL_WEIGHT = 1e-4
ROUND_TRIP_MIN = 0.95
# What a caption says, in make_shapes.draw_attributes' order: the shape's colour, its kind, its
# place, the background's colour.
ATTRIBUTES = (list(make_shapes.COLOURS), make_shapes.SHAPES, list(make_shapes.POSITIONS), list(make_shapes.COLOURS))
CLIP_LENGTH = 77
TEXT_ACCURACY_MIN = 0.99


def shapes(count, seed, size):
    """`count` shapes images as a float tensor [n, 3, size, size] in [-1, 1], and their captions."""
    rng = np.random.default_rng(seed)
    images, captions = [], []
    for _ in range(count):
        img, caption = make_shapes.draw(rng, size)
        images.append(np.asarray(img))
        captions.append(caption)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 127.5 - 1
    return x, captions


def train_autoencoder(args):
    torch.manual_seed(args.seed)
    vae = AutoencoderKL(**AUTOENCODER, sample_size=args.size)
    # The posterior starts narrow (std e^-3) rather than at std 1, which would drown the means at
    # first and cost most of the few steps there is time for.
    with torch.no_grad():
        vae.encoder.conv_out.bias[LATENT_CHANNELS:] = -6.0
    images, _ = shapes(args.train_images, args.seed, args.size)
    opt = torch.optim.AdamW(vae.parameters(), lr=5e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=args.steps, pct_start=0.05)
    g = torch.Generator().manual_seed(args.seed + 1)
    start = time.time()
    for step in range(args.steps):
        # Random crops of half the side: a quarter of the work per image, and every part of the
        # image is still seen (the network is convolutional; the mid-block attention averages).
        batch = images[torch.randint(len(images), (args.batch,), generator=g)]
        y, x = torch.randint(args.size // 2 + 1, (2,), generator=g).tolist()
        batch = batch[:, :, y:y + args.size // 2, x:x + args.size // 2]
        posterior = vae.encode(batch).latent_dist
        recon = vae.decode(posterior.sample(generator=g)).sample
        mse = torch.nn.functional.mse_loss(recon, batch)
        # L1 besides MSE: sharper edges, which the checker's fill ratios (square ~1, circle ~pi/4) need.
        loss = mse + torch.nn.functional.l1_loss(recon, batch) + KL_WEIGHT * posterior.kl().mean() / batch[0].numel()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"autoencoder step {step}: mse {mse.item():.5f} ({time.time() - start:.0f} s)", flush=True)
    vae.eval()
    with torch.no_grad():
        means = torch.cat([vae.encode(images[i:i + 64]).latent_dist.mean for i in range(0, len(images), 64)])
    shift = means.mean().item()
    scale = 1.0 / (means - shift).std().item()
    vae.register_to_config(shift_factor=shift, scaling_factor=scale)
    return vae, time.time() - start


def caption_batch(rng, count):
    """`count` captions drawn as make_shapes draws them, and each attribute's class index [count]."""
    drawn = [make_shapes.draw_attributes(rng) for _ in range(count)]
    captions = [make_shapes.caption_of(*a) for a in drawn]
    labels = [torch.tensor([names.index(a[k]) for a in drawn]) for k, names in enumerate(ATTRIBUTES)]
    return captions, labels


def teach_text_encoders(clip_tok, t5_tok, clip, t5, args):
    """Teaches the random T5 and CLIP the captions' language, from captions alone: every T5 state
    (padding included, since FluxPipeline passes T5 no attention mask) and CLIP's pooled vector
    must name all four attributes, through linear heads thrown away afterwards. A pretrained T5
    knows that the colour after "on a" is the background's; a random one barely tells word order
    apart (FLUX gives text tokens no positions), and flux-tiny then mixes up the shape's colour
    and the background's. Returns each encoder's accuracy on fresh captions."""
    torch.manual_seed(args.seed + 3)
    rng = np.random.default_rng(args.seed + 3)
    t5_heads = torch.nn.ModuleList(torch.nn.Linear(T5_WIDTH, len(names)) for names in ATTRIBUTES)
    clip_heads = torch.nn.ModuleList(torch.nn.Linear(CLIP_WIDTH, len(names)) for names in ATTRIBUTES)
    modules = [t5, clip, t5_heads, clip_heads]
    opt = torch.optim.Adam([p for m in modules for p in m.parameters()], lr=3e-3)

    def ids(tok, captions, length):
        return tok(captions, padding="max_length", max_length=length, truncation=True, return_tensors="pt").input_ids

    def logits(captions):
        states = t5(input_ids=ids(t5_tok, captions, args.t5_length)).last_hidden_state
        pooled = clip(input_ids=ids(clip_tok, captions, CLIP_LENGTH)).pooler_output
        return [head(states) for head in t5_heads], [head(pooled) for head in clip_heads]

    ce = torch.nn.functional.cross_entropy
    start = time.time()
    for step in range(args.text_steps):
        captions, labels = caption_batch(rng, 64)
        t5_out, clip_out = logits(captions)
        loss = sum(ce(t.flatten(0, 1), y.repeat_interleave(t.shape[1])) + ce(c, y)
                   for t, c, y in zip(t5_out, clip_out, labels))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == args.text_steps - 1:
            print(f"text encoders step {step}: loss {loss.item():.4f} ({time.time() - start:.0f} s)", flush=True)
    with torch.no_grad():
        captions, labels = caption_batch(np.random.default_rng(args.seed + 4), 512)
        t5_out, clip_out = logits(captions)
        t5_right = min((t.argmax(-1) == y[:, None]).float().mean().item() for t, y in zip(t5_out, labels))
        clip_right = min((c.argmax(-1) == y).float().mean().item() for c, y in zip(clip_out, labels))
    return {"t5": t5_right, "clip": clip_right}


def round_trip_score(vae, args):
    """make_shapes.py's checker on decode(sample of encode(image)) of held-out images."""
    images, captions = shapes(args.check_images, args.seed + 1000, args.size)
    g = torch.Generator().manual_seed(args.seed + 2)
    with torch.no_grad():
        out = torch.cat([vae.decode(vae.encode(images[i:i + 64]).latent_dist.sample(generator=g)).sample
                         for i in range(0, len(images), 64)])
    pixels = ((out.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    right = {"colour": 0, "shape": 0, "background": 0}
    for pixel, caption in zip(pixels, captions):
        colour, shape, _, background = make_shapes.CAPTION.match(caption).groups()
        got = make_shapes.analyse(Image.fromarray(pixel))
        right["colour"] += got["colour"] == colour
        right["shape"] += got["shape"] == shape
        right["background"] += got["background"] == background
    return {k: v / len(captions) for k, v in right.items()}


def tokenizer_fixtures(given, tmp):
    if given:
        return given
    out = tmp / "tokenizers"
    subprocess.run([sys.executable, str(ROOT / "tests/tokenizer/make_flux_fixtures.py"), "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL, cwd=ROOT / "tests/tokenizer")
    return out


def build(args, out, tmp):
    if args.vae_from:
        shutil.copytree(args.vae_from / "vae", out / "vae")
        print(f"autoencoder: {args.vae_from / 'vae'}", flush=True)
    else:
        vae, seconds = train_autoencoder(args)
        score = round_trip_score(vae, args)
        print(f"autoencoder: trained in {seconds:.0f} s; round trip of {args.check_images} held-out images by "
              f"make_shapes.py's checker: colour {score['colour']:.3f}, shape {score['shape']:.3f}, "
              f"background {score['background']:.3f}; scaling_factor {vae.config.scaling_factor:.4f}, "
              f"shift_factor {vae.config.shift_factor:.4f}", flush=True)
        if min(score.values()) < ROUND_TRIP_MIN:
            sys.exit(f"the autoencoder's round trip scores below {ROUND_TRIP_MIN}: train longer (--steps)")
        vae.save_pretrained(out / "vae")
    clip_tok, t5_tok, clip, t5 = write_untrained_parts(tokenizer_fixtures(args.tokenizers, tmp), out, args.seed)
    right = teach_text_encoders(clip_tok, t5_tok, clip, t5, args)
    print(f"text encoders: each attribute named from every T5 state and from CLIP's pooled vector of 512 fresh "
          f"captions, the worst attribute's accuracy: T5 {right['t5']:.3f}, CLIP {right['clip']:.3f}", flush=True)
    if min(right.values()) < TEXT_ACCURACY_MIN:
        sys.exit(f"the text encoders name the captions' attributes below {TEXT_ACCURACY_MIN}: train longer "
                 "(--text-steps)")
    clip.save_pretrained(out / "text_encoder")
    t5.save_pretrained(out / "text_encoder_2")


def write_untrained_parts(tokenizers, out, seed):
    """Everything of the folder but vae/: the seeded text encoders and the tokenizers, the seeded
    transformer and the scheduler (bench/flux_sample_models.py writes the same beside an untrained
    autoencoder). Returns (clip_tok, t5_tok, clip, t5)."""
    encoders = build_text_encoders(tokenizers, out, t5_width=T5_WIDTH, clip_width=CLIP_WIDTH)
    # diffusers' FluxPipeline pads CLIP's ids to the tokenizer's model_max_length, which the
    # fixture leaves unset; titan pads to max_position_embeddings, 77.
    for folder in ("tokenizer", "tokenizer_2"):
        (out / folder / "reference.json").unlink()  # the tokenizer tests' expectations, no part of a pipeline
    config = out / "tokenizer" / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_max_length": 77}, indent=2) + "\n")
    torch.manual_seed(seed)
    FluxTransformer2DModel(**TRANSFORMER).save_pretrained(out / "transformer")
    FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0,
                                    use_dynamic_shifting=False).save_pretrained(out / "scheduler")
    return encoders


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tokenizers", type=Path, default=None,
                        help="tests/tokenizer/make_flux_fixtures.py's output (default: made here, which "
                             "needs scripts/setup.sh reference's CLIP merges)")
    parser.add_argument("--size", type=int, default=64, help="the shapes' side in pixels (make_shapes.py's --size)")
    parser.add_argument("--steps", type=int, default=4000, help="the autoencoder's training steps")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vae-from", type=Path, default=None,
                        help="a folder this script wrote: its vae/ is copied instead of training one")
    parser.add_argument("--text-steps", type=int, default=1500,
                        help="the text encoders' training steps (64 captions each)")
    parser.add_argument("--t5-length", type=int, default=32,
                        help="T5's tokens per caption, as `titan flux encode --t5-length` will pad them")
    parser.add_argument("--train-images", type=int, default=2048)
    parser.add_argument("--check-images", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="PyTorch threads (more than 1 is slower on a busy 2-core machine: measured 20x)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out = args.out.resolve()  # the tokenizer fixtures are made from their own folder
    start = time.time()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=args.out.name + ".", dir=args.out.parent))
    try:
        build(args, staging / "pipeline", staging)
        shutil.rmtree(args.out, ignore_errors=True)
        os.rename(staging / "pipeline", args.out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"wrote {args.out} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
