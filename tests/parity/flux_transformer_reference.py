#!/usr/bin/env python3
"""diffusers' FluxTransformer2DModel as the reference for titan's FLUX transformer
(test_flux_transformer.cpp).

  flux_transformer_reference.py --out DIR
      writes, under DIR/flux_transformer (staged and renamed, so a reader never sees half of it),
      for each case (tiny: diffusers' own test config; tiny_guidance: the same with
      guidance_embeds; deep: 2 + 2 blocks, tokens packed 2 x 2, guidance):
        CASE/diffusers/             the seeded model by save_pretrained (float32), every parameter
                                    random (norm scales around 1, so swapped tensors show);
        CASE/bfl.safetensors        the same weights by BFL's names, checked to convert back
                                    exactly through diffusers' own single-file converter;
        CASE/reference.safetensors  inputs "in.*" (img, txt, y, t, guidance, img_ids, txt_ids),
                                    the f32 forward "out.sample"; one rectified-flow step in
                                    float64 (diffusers' float32 sinusoid and RoPE product lifted,
                                    see float64_throughout) from "in.x0", "in.noise": "train.loss" and
                                    "grad.<diffusers name>" for every parameter;
      and packing.safetensors: latents [2, 4, 6, 8] and FluxPipeline's _pack_latents,
      _unpack_latents and _prepare_latent_image_ids of them (patch 2).
"""
import argparse
import contextlib
import inspect
import math
import os
import shutil
import sys

import torch
from diffusers import FluxPipeline, FluxTransformer2DModel
from diffusers.loaders import single_file_utils
from diffusers.models import embeddings
from diffusers.models.transformers import transformer_flux

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import write_safetensors  # noqa: E402

TINY = dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8])
CASES = {
    "tiny": (dict(TINY, guidance_embeds=False), (4, 6), 1),
    "tiny_guidance": (dict(TINY, guidance_embeds=True), (4, 6), 1),
    # Packed 2 x 2 (4 latent channels -> 16 per token) as FLUX's pipelines pack; diffusers' own
    # patch_size stays 1, as in every FLUX checkpoint (it would widen proj_out, not the packing).
    "deep": (dict(TINY, in_channels=16, num_layers=2, num_single_layers=2, guidance_embeds=True), (6, 8), 2),
}
BATCH, TXT_LEN = 2, 5


def new_model(config, seed):
    torch.manual_seed(seed)
    model = FluxTransformer2DModel(**config).eval()
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in model.named_parameters():
            base = 1.0 if "norm" in name and name.endswith("weight") and "linear" not in name else 0.0
            p.copy_(base + 0.3 * torch.randn(p.shape, generator=g))
    return model


def rope_in_input_dtype(x, freqs_cis, use_real=True, use_real_unbind_dim=-1, sequence_dim=2):
    """diffusers' apply_rotary_emb for FLUX's interleaved pairs, without its cast of x to float32,
    so that the float64 reference stays float64 (the cos/sin tables stay float32 in both)."""
    assert use_real and use_real_unbind_dim == -1
    cos, sin = freqs_cis
    shape = (1, -1, 1, cos.shape[-1]) if sequence_dim == 1 else (1, 1, -1, cos.shape[-1])
    cos, sin = cos.reshape(shape).to(x.dtype), sin.reshape(shape).to(x.dtype)
    x_real, x_imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    x_rotated = torch.stack([-x_imag, x_real], dim=-1).flatten(3)
    return x * cos + x_rotated * sin


def sinusoid_in_float64(timesteps, embedding_dim, flip_sin_to_cos=False, downscale_freq_shift=1, scale=1,
                        max_period=10000):
    """diffusers' get_timestep_embedding in float64 (its own is float32 whatever the input)."""
    half = embedding_dim // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float64) / (half - downscale_freq_shift)
    emb = scale * timesteps[:, None].double() * torch.exp(exponent)[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    return emb


@contextlib.contextmanager
def float64_throughout():
    """diffusers' FLUX model computes the timestep sinusoid and the RoPE product in float32
    whatever the model's dtype; for a float64 reference both run in float64 here (the RoPE
    cos/sin tables stay float32, as titan's are)."""
    saved = (embeddings.get_timestep_embedding, transformer_flux.apply_rotary_emb)
    embeddings.get_timestep_embedding = sinusoid_in_float64
    transformer_flux.apply_rotary_emb = rope_in_input_dtype
    try:
        yield
    finally:
        embeddings.get_timestep_embedding, transformer_flux.apply_rotary_emb = saved


def bfl_to_diffusers(bfl, inner_dim):
    """diffusers' own single-file converter with its hard-coded FLUX width (3072, used to split
    linear1) replaced by the tiny model's."""
    source = inspect.getsource(single_file_utils.convert_flux_transformer_checkpoint_to_diffusers)
    assert "inner_dim = 3072" in source
    scope = dict(vars(single_file_utils))
    exec(source.replace("inner_dim = 3072", f"inner_dim = {inner_dim}"), scope)
    return scope["convert_flux_transformer_checkpoint_to_diffusers"](dict(bfl))


def to_bfl(sd, layers, single_layers):
    """diffusers' names -> BFL's (the reverse of diffusers' convert_flux_transformer_checkpoint_to_diffusers)."""
    out = {}
    ren = {"x_embedder": "img_in", "context_embedder": "txt_in", "proj_out": "final_layer.linear",
           "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
           "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
           "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
           "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
           "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
           "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer"}
    for d, b in ren.items():
        for s in ("weight", "bias"):
            if f"{d}.{s}" in sd:
                out[f"{b}.{s}"] = sd[f"{d}.{s}"]
    for s in ("weight", "bias"):
        scale, shift = sd[f"norm_out.linear.{s}"].chunk(2, dim=0)
        out[f"final_layer.adaLN_modulation.1.{s}"] = torch.cat([shift, scale])
    for i in range(layers):
        d, b = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        for s in ("weight", "bias"):
            out[f"{b}img_attn.qkv.{s}"] = torch.cat([sd[f"{d}attn.to_{x}.{s}"] for x in "qkv"])
            out[f"{b}txt_attn.qkv.{s}"] = torch.cat([sd[f"{d}attn.add_{x}_proj.{s}"] for x in "qkv"])
            for dn, bn in (("norm1.linear", "img_mod.lin"), ("norm1_context.linear", "txt_mod.lin"),
                           ("attn.to_out.0", "img_attn.proj"), ("attn.to_add_out", "txt_attn.proj"),
                           ("ff.net.0.proj", "img_mlp.0"), ("ff.net.2", "img_mlp.2"),
                           ("ff_context.net.0.proj", "txt_mlp.0"), ("ff_context.net.2", "txt_mlp.2")):
                out[f"{b}{bn}.{s}"] = sd[f"{d}{dn}.{s}"]
        for dn, bn in (("norm_q", "img_attn.norm.query_norm"), ("norm_k", "img_attn.norm.key_norm"),
                       ("norm_added_q", "txt_attn.norm.query_norm"), ("norm_added_k", "txt_attn.norm.key_norm")):
            out[f"{b}{bn}.scale"] = sd[f"{d}attn.{dn}.weight"]
    for i in range(single_layers):
        d, b = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        for s in ("weight", "bias"):
            out[f"{b}linear1.{s}"] = torch.cat([sd[f"{d}attn.to_{x}.{s}"] for x in "qkv"] + [sd[f"{d}proj_mlp.{s}"]])
            out[f"{b}linear2.{s}"] = sd[f"{d}proj_out.{s}"]
            out[f"{b}modulation.lin.{s}"] = sd[f"{d}norm.linear.{s}"]
        out[f"{b}norm.query_norm.scale"] = sd[f"{d}attn.norm_q.weight"]
        out[f"{b}norm.key_norm.scale"] = sd[f"{d}attn.norm_k.weight"]
    return out


def write_case(stage, name, config, latent_hw, p, seed):
    model = new_model(config, seed)
    folder = os.path.join(stage, name)
    model.save_pretrained(os.path.join(folder, "diffusers"), safe_serialization=True)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    bfl = to_bfl(sd, config["num_layers"], config["num_single_layers"])
    back = bfl_to_diffusers(bfl, config["num_attention_heads"] * config["attention_head_dim"])
    assert back.keys() == sd.keys(), set(back) ^ set(sd)
    for k, v in sd.items():
        assert torch.equal(back[k], v), k
    write_safetensors(os.path.join(folder, "bfl.safetensors"), bfl, {"format": "pt"})

    h, w = latent_hw
    g = torch.Generator().manual_seed(seed + 200)
    c = config["in_channels"]
    length = (h // p) * (w // p)
    inputs = {
        "in.img": torch.randn(BATCH, length, c, generator=g),
        "in.txt": torch.randn(BATCH, TXT_LEN, config["joint_attention_dim"], generator=g),
        "in.y": torch.randn(BATCH, config["pooled_projection_dim"], generator=g),
        "in.t": torch.tensor([0.3, 0.85]),
        "in.img_ids": FluxPipeline._prepare_latent_image_ids(BATCH, h // p, w // p, "cpu", torch.float32),
        "in.txt_ids": torch.zeros(TXT_LEN, 3),
        "in.x0": torch.randn(BATCH, length, c, generator=g),
        "in.noise": torch.randn(BATCH, length, c, generator=g),
    }
    if config["guidance_embeds"]:
        inputs["in.guidance"] = torch.tensor([3.5, 1.0])

    def run(m, img, dtype):
        return m(hidden_states=img.to(dtype), encoder_hidden_states=inputs["in.txt"].to(dtype),
                 pooled_projections=inputs["in.y"].to(dtype), timestep=inputs["in.t"].to(dtype),
                 img_ids=inputs["in.img_ids"], txt_ids=inputs["in.txt_ids"],
                 guidance=inputs["in.guidance"].to(dtype) if "in.guidance" in inputs else None,
                 return_dict=False)[0]

    out = dict(inputs)
    with torch.no_grad():
        out["out.sample"] = run(model, inputs["in.img"], torch.float32)
    model64 = model.double()
    t = inputs["in.t"].double()[:, None, None]
    x0, noise = inputs["in.x0"].double(), inputs["in.noise"].double()
    with float64_throughout():
        pred = run(model64, (1 - t) * x0 + t * noise, torch.float64)
    loss = torch.mean((pred - (noise - x0)) ** 2)
    loss.backward()
    out["train.loss"] = loss.detach().reshape(1)
    for k, prm in model64.named_parameters():
        out[f"grad.{k}"] = prm.grad
    write_safetensors(os.path.join(folder, "reference.safetensors"), out, {})


def reference(out_dir):
    root = os.path.join(out_dir, "flux_transformer")
    stage = root + f".stage{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    for i, (name, (config, hw, patch)) in enumerate(CASES.items()):
        write_case(stage, name, config, hw, patch, seed=i)

    g = torch.Generator().manual_seed(9)
    latents = torch.randn(2, 4, 6, 8, generator=g)
    packed = FluxPipeline._pack_latents(latents, 2, 4, 6, 8)
    vae_scale = 8
    unpacked = FluxPipeline._unpack_latents(packed, 6 * vae_scale, 8 * vae_scale, vae_scale)
    ids = FluxPipeline._prepare_latent_image_ids(2, 3, 4, "cpu", torch.float32)
    write_safetensors(os.path.join(stage, "packing.safetensors"),
                      {"latents": latents, "packed": packed, "unpacked": unpacked, "image_ids": ids}, {})
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
