#!/usr/bin/env python3
"""transformers as the reference for titan's text encoders of FLUX: T5 v1.1's encoder
(T5EncoderModel) and CLIP's text model (CLIPTextModel), tiny, seeded, random weights.

  text_encoders_reference.py reference --out DIR
      writes under DIR (replaced as a whole, so a reader never sees half of it):
        buckets.safetensors  T5Attention._relative_position_bucket (bidirectional) of relative
                    positions "positions" for several (num_buckets, max_distance): "b<n>_<d>";
        CASE/model/ by save_pretrained in float32, and CASE/reference.safetensors: the inputs
                    "ids" and "ids_padded" with "mask" (1 a token, 0 padding) and the outputs
                    "last_hidden_state", "pooler_output" (CLIP) on each, "*_padded" with the mask,
        for CASE in
          t5             T5EncoderModel, feed_forward_proj "gated-gelu" (also t5/sharded/: shards
                         and model.safetensors.index.json, and t5/embed_tokens/: the embedding under
                         encoder.embed_tokens.weight instead of shared.weight);
          clip_eos2      CLIPTextModel with eos_token_id 2 (pooled at the largest id; also
                         clip_eos2/legacy/: the tensors under transformers 4's "text_model." names,
                         and clip_eos2/projection/: a CLIPTextModelWithProjection);
          clip_eos       CLIPTextModel with another eos_token_id (pooled at its first position).
  text_encoders_reference.py check --model DIR --reference FILE [--model DIR --reference FILE ...]
      loads each DIR (a folder titan exported) with from_pretrained, computing in float32, requires
      a clean load (no missing, unexpected or mismatched tensors) and its outputs on the inputs of
      the FILE given with it to be within 1e-5 (relative to the largest) of FILE's; exits 1
      otherwise, saying why. One process for several folders, as importing torch takes seconds.
"""
import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, T5Config,
                          T5EncoderModel)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import write_safetensors  # noqa: E402

VOCAB = 100
BUCKET_CONFIGS = [(8, 16), (32, 128), (32, 64), (64, 256), (16, 100), (6, 20)]
TOLERANCE = 1e-5


def t5_config():
    return T5Config(d_model=32, d_ff=37, d_kv=8, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu",
                    relative_attention_num_buckets=8, relative_attention_max_distance=16, vocab_size=VOCAB,
                    layer_norm_epsilon=1e-6)


def clip_config(eos):
    return CLIPTextConfig(hidden_size=32, intermediate_size=37, num_hidden_layers=5, num_attention_heads=4,
                          max_position_embeddings=77, vocab_size=VOCAB, eos_token_id=eos, bos_token_id=0,
                          pad_token_id=1, projection_dim=16)


def randomize(model, seed):
    """Random weights everywhere, norms and biases included: inits that leave norms at one and
    biases at zero would hide a swapped or dropped one."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            elif name.endswith("bias") or "relative_attention_bias" in name:
                p.copy_(0.3 * noise)
            elif "embedding" in name or "shared" in name or "embed_tokens" in name:
                p.copy_(noise)
            else:
                p.copy_(0.15 * noise)
    return model.eval()


def t5_inputs():
    """3 rows of 20 ids (distances past max_distance 16 reach the last buckets); padded: rows of
    20, 13 and 7 tokens, then T5's pad id 0."""
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(2, VOCAB, (3, 20), generator=gen)
    lengths = [20, 13, 7]
    mask = torch.zeros(3, 20, dtype=torch.long)
    padded = ids.clone()
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        padded[row, n:] = 0
    return ids, padded, mask


def clip_inputs(eos):
    """3 rows of 10 ids, each with bos 0 and eos: with eos 2 (legacy), the eos position is where the
    vocabulary's largest id is (as 49407 is CLIP's), padded after it with that id again (FLUX pads
    with end-of-text), so the first of equal maxima counts; with another eos, ids larger than it
    come before it, it appears twice, and one row has none (pooled at 0)."""
    gen = torch.Generator().manual_seed(11)
    ids = torch.randint(3, VOCAB - 2, (3, 10), generator=gen)
    ids[:, 0] = 0
    lengths = [10, 6, 4]
    mask = torch.zeros(3, 10, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    if eos == 2:
        top = VOCAB - 1
        ids[0, 9] = top
        ids[1, 5] = top
        ids[2, 3] = top
        ids[2, 7] = top
    else:
        ids[0, 2] = VOCAB - 1
        ids[0, 7] = eos
        ids[0, 9] = eos
        ids[1, 5] = eos
        ids[1, 1] = VOCAB - 1
    padded = ids.clone()
    for row, n in enumerate(lengths):
        padded[row, n:] = VOCAB - 1 if eos == 2 else eos
    return ids, padded, mask


def outputs(model, ids, mask=None):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    got = {"last_hidden_state": out.last_hidden_state.float()}
    if getattr(out, "pooler_output", None) is not None:
        got["pooler_output"] = out.pooler_output.float()
    return got


def reference_tensors(model, ids, padded, mask):
    ref = {"ids": ids, "ids_padded": padded, "mask": mask}
    ref.update(outputs(model, ids))
    ref.update({k + "_padded": v for k, v in outputs(model, padded, mask).items()})
    return ref


def rename_tensors(src, dst, rename):
    """src's folder as dst with every tensor renamed."""
    shutil.copytree(src, dst)
    weights = os.path.join(dst, "model.safetensors")
    tensors = load_file(weights)
    save_file({rename(k): v for k, v in tensors.items()}, weights, metadata={"format": "pt"})


def buckets():
    from transformers.models.t5.modeling_t5 import T5Attention
    out = {}
    for n, d in BUCKET_CONFIGS:
        positions = torch.arange(-3 * d, 3 * d + 1)
        out[f"positions{n}_{d}"] = positions
        out[f"b{n}_{d}"] = T5Attention._relative_position_bucket(positions, True, n, d)
    return out


def reference(out):
    staging = out + ".staging-" + str(os.getpid())
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    write_safetensors(os.path.join(staging, "buckets.safetensors"), buckets(), {})

    torch.manual_seed(0)
    t5 = randomize(T5EncoderModel._from_config(t5_config(), attn_implementation="eager"), 1)
    root = os.path.join(staging, "t5")
    t5.save_pretrained(os.path.join(root, "model"))
    t5.save_pretrained(os.path.join(root, "sharded"), max_shard_size="20KB")
    rename_tensors(os.path.join(root, "model"), os.path.join(root, "embed_tokens"),
                   lambda k: "encoder.embed_tokens.weight" if k == "shared.weight" else k)
    write_safetensors(os.path.join(root, "reference.safetensors"), reference_tensors(t5, *t5_inputs()), {})

    for case, eos, seed in (("clip_eos2", 2, 2), ("clip_eos", VOCAB - 3, 3)):
        clip = randomize(CLIPTextModel._from_config(clip_config(eos), attn_implementation="eager"), seed)
        root = os.path.join(staging, case)
        clip.save_pretrained(os.path.join(root, "model"))
        write_safetensors(os.path.join(root, "reference.safetensors"),
                          reference_tensors(clip, *clip_inputs(eos)), {})
        if eos == 2:
            rename_tensors(os.path.join(root, "model"), os.path.join(root, "legacy"), lambda k: "text_model." + k)
            projected = CLIPTextModelWithProjection._from_config(clip_config(eos), attn_implementation="eager")
            randomize(projected, seed).save_pretrained(os.path.join(root, "projection"))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(staging, out)


def check_one(model_dir, reference_file):
    """What is wrong with transformers' load of `model_dir` and its outputs; [] when nothing."""
    ref = load_file(reference_file)
    model_type = json.load(open(os.path.join(model_dir, "config.json")))["model_type"]
    cls = T5EncoderModel if model_type == "t5" else CLIPTextModel
    model, info = cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True)
    problems = [f"{k}: {v}" for k, v in info.items() if v]
    got = outputs(model.eval(), ref["ids"])
    got.update({k + "_padded": v for k, v in outputs(model, ref["ids_padded"], ref["mask"]).items()})
    for name, value in got.items():
        want = ref[name]
        err = ((value - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
        if err > TOLERANCE:
            problems.append(f"{name}: relative error {err:.3g} > {TOLERANCE}")
    return problems


def check(model_dirs, reference_files):
    failed = False
    for model_dir, reference_file in zip(model_dirs, reference_files, strict=True):
        problems = check_one(model_dir, reference_file)
        if problems:
            print(f"transformers' load of {model_dir}:", *problems, sep="\n  ")
            failed = True
    if failed:
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("reference")
    r.add_argument("--out", required=True)
    c = sub.add_parser("check")
    c.add_argument("--model", required=True, action="append")
    c.add_argument("--reference", required=True, action="append")
    args = p.parse_args()
    if args.command == "reference":
        reference(args.out)
    else:
        check(args.model, args.reference)


if __name__ == "__main__":
    main()
