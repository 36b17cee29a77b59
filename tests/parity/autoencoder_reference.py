#!/usr/bin/env python3
"""diffusers' AutoencoderKL as the reference for titan's FLUX autoencoder (test_autoencoder.cpp).

  autoencoder_reference.py --out DIR
      writes, under DIR/autoencoder (staged and renamed, so a reader never sees half of it):
        diffusers/              a tiny seeded AutoencoderKL with FLUX's block types, no quant
                                convs, by save_pretrained (config.json +
                                diffusion_pytorch_model.safetensors, float32);
        ae.safetensors          the same weights by BFL's names (black-forest-labs/flux,
                                src/flux/modules/autoencoder.py), renamed here and checked to
                                convert back through diffusers' own single-file converter;
        reference.safetensors   "in.image" [2, 3, 32, 32] and the posterior's "out.mean" and
                                "out.logvar"; "in.z" [2, 4, 16, 16] and the decoder's
                                "out.decoded".
"""
import argparse
import os
import shutil
import sys

import torch
from diffusers import AutoencoderKL
from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import write_safetensors  # noqa: E402

CONFIG = dict(in_channels=3, out_channels=3, latent_channels=4,
              down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2,
              block_out_channels=[32, 64], layers_per_block=2, norm_num_groups=32,
              scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False,
              mid_block_add_attention=True, sample_size=32)


def new_model():
    torch.manual_seed(0)
    model = AutoencoderKL(**CONFIG).eval()
    # Norms start at weight 1, bias 0, where a swapped weight and bias would go unseen.
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=g))
    return model


def bfl_name(name, levels):
    """diffusers' name -> BFL's (the reverse of diffusers' convert_ldm_vae_checkpoint)."""
    p = name.split(".")
    part, out = p[1], [p[0]]
    if part in ("down_blocks", "up_blocks"):
        down = part == "down_blocks"
        i = int(p[2])
        out += ["down" if down else "up", str(i if down else levels - 1 - i)]
        if p[3] == "resnets":
            out += ["block"] + p[4:]
        else:
            out += ["downsample" if down else "upsample"] + p[5:]
    elif part == "mid_block":
        out.append("mid")
        if p[2] == "resnets":
            out += ["block_%d" % (int(p[3]) + 1)] + p[4:]
        else:
            proj = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out": "proj_out"}[p[4]]
            out += ["attn_1", proj] + p[6 if p[4] == "to_out" else 5:]
    elif part == "conv_norm_out":
        out += ["norm_out"] + p[2:]
    else:
        out += p[1:]
    return ".".join("nin_shortcut" if s == "conv_shortcut" else s for s in out)


def to_bfl(state, levels):
    out = {}
    for name, t in state.items():
        if ".attentions.0.to_" in name and name.endswith(".weight"):
            t = t.reshape(t.shape[0], t.shape[1], 1, 1)  # BFL's q, k, v, proj_out are 1x1 convolutions
        out[bfl_name(name, levels)] = t.contiguous()
    return out


def reference(out):
    root = os.path.join(out, "autoencoder")
    # Per process: ctest's fixture and a test binary run alone may both write the reference.
    stage = "%s.partial-%d" % (root, os.getpid())
    os.makedirs(stage)
    model = new_model()
    model.save_pretrained(os.path.join(stage, "diffusers"), safe_serialization=True)

    state = model.state_dict()
    bfl = to_bfl(state, len(CONFIG["block_out_channels"]))
    back = convert_ldm_vae_checkpoint(bfl, dict(CONFIG))
    assert set(back) == set(state), set(back) ^ set(state)
    for name, t in state.items():
        assert torch.equal(back[name].reshape(t.shape), t), name
    write_safetensors(os.path.join(stage, "ae.safetensors"), bfl, {"format": "pt"})

    g = torch.Generator().manual_seed(2)
    image = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    z = torch.randn(2, CONFIG["latent_channels"], 16, 16, generator=g)
    with torch.no_grad():
        posterior = model.encode(image).latent_dist
        decoded = model.decode(z).sample
    write_safetensors(os.path.join(stage, "reference.safetensors"),
                      {"in.image": image, "out.mean": posterior.mean, "out.logvar": posterior.logvar,
                       "in.z": z, "out.decoded": decoded}, {})
    shutil.rmtree(root, ignore_errors=True)
    try:
        os.rename(stage, root)
    except OSError:  # another process put the same reference there first
        shutil.rmtree(stage)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    reference(args.out)


if __name__ == "__main__":
    main()
