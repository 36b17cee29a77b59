#!/usr/bin/env python3
"""Hugging Face transformers as the reference for titan's Llama 3 import and export.

  hf_llama3.py reference --out DIR
      (a ctest fixture) builds a tiny transformers.LlamaForCausalLM with random weights, writes
      it with save_pretrained (safetensors) as DIR/hf_llama3/single (one model.safetensors) and
      DIR/hf_llama3/sharded (shards and model.safetensors.index.json), and its logits on fixed
      tokens as DIR/hf_llama3/reference.safetensors ("in.tokens", "out.logits").
  hf_llama3.py logits --model DIR --out FILE
      loads DIR (a folder titan exported) with LlamaForCausalLM.from_pretrained and writes its
      logits on the same tokens to FILE, in the same form.

The config exercises what titan must carry over: grouped-query attention, Llama 3.1 RoPE scaling
with factors other than the defaults (so that low, middle and high frequencies are each treated
differently at head_dim 16), a non-default rms_norm_eps, and an intermediate_size of its own.
"""
import argparse
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import write_safetensors  # noqa: E402

CONFIG = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, rms_norm_eps=1e-6,
              rope_theta=10000.0, tie_word_embeddings=False,
              rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 2.0, "original_max_position_embeddings": 64})


def tokens():
    gen = torch.Generator().manual_seed(1234)
    return torch.randint(0, CONFIG["vocab_size"], (2, 24), generator=gen)


def logits_of(model):
    t = tokens()
    with torch.no_grad():
        return {"in.tokens": t, "out.logits": model(t).logits.float()}


def reference(out):
    root = os.path.join(out, "hf_llama3")
    os.makedirs(root, exist_ok=True)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG, attn_implementation="eager")).eval()
    # Random weights everywhere, norms included: transformers' own init leaves norms at one,
    # which would hide a swapped norm.
    gen = torch.Generator().manual_seed(42)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.2 * noise if name.endswith("norm.weight") else 0.08 * noise)
    model.save_pretrained(os.path.join(root, "single"), safe_serialization=True)
    model.save_pretrained(os.path.join(root, "sharded"), safe_serialization=True, max_shard_size="100KB")
    write_safetensors(os.path.join(root, "reference.safetensors"), logits_of(model), {})


def logits(model_dir, out):
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                             attn_implementation="eager").eval()
    write_safetensors(out, logits_of(model), {})


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    ref = sub.add_parser("reference")
    ref.add_argument("--out", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("--model", required=True)
    lg.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.command == "reference":
        reference(args.out)
    else:
        logits(args.model, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
