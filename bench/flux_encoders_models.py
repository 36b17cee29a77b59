#!/usr/bin/env python3
"""The three frozen encoders of bench/flux_encoders.cpp, written by their own libraries'
save_pretrained with seeded random weights (nothing is downloaded):

  vae/   diffusers AutoencoderKL as FLUX.1 configures it: block_out_channels (128, 256, 512, 512),
         2 layers per block, 16 latent channels, GroupNorm(32), no quant convs, mid-block attention;
  t5/    transformers T5EncoderModel, T5 v1.1-style (gated-gelu, untied) at a small size: d_model
         512, d_ff 1024, 8 layers, 8 heads of d_kv 64, 32 buckets, vocab 32128;
  clip/  transformers CLIPTextModel at a small size: hidden 512, 8 layers, 8 heads, intermediate
         2048, 77 positions, quick_gelu, CLIP's vocab 49408.

Argument: a JSON file {"dir"}. Prints one JSON line {"vae", "t5", "clip" (the folders), "torch",
"diffusers", "transformers"}, or {"error"}.
"""
import json
import os
import sys


def main():
    with open(sys.argv[1]) as f:
        out = json.load(f)["dir"]
    try:
        import diffusers
        import torch
        import transformers
    except ImportError as e:
        print(json.dumps({"error": f"cannot import torch, diffusers and transformers with {sys.executable}: {e}"}))
        return 0
    folders = {name: os.path.join(out, name) for name in ("vae", "t5", "clip")}

    torch.manual_seed(0)
    vae = diffusers.AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                                  up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512),
                                  layers_per_block=2, latent_channels=16, norm_num_groups=32, sample_size=1024,
                                  scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                                  use_post_quant_conv=False)
    vae.save_pretrained(folders["vae"])

    torch.manual_seed(1)
    t5 = transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_heads=8,
        relative_attention_num_buckets=32, relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
        tie_word_embeddings=False, dropout_rate=0.0))
    t5.save_pretrained(folders["t5"])

    torch.manual_seed(2)
    clip = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8,
        max_position_embeddings=77, hidden_act="quick_gelu", bos_token_id=49406, eos_token_id=49407,
        pad_token_id=49407))
    clip.save_pretrained(folders["clip"])

    print(json.dumps({**folders, "torch": torch.__version__, "diffusers": diffusers.__version__,
                      "transformers": transformers.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
