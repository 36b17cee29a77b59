#!/usr/bin/env python3
"""Hugging Face transformers as the reference for titan's import, export, training and generation
of Llama 3, Qwen 3 and Qwen 3 MoE (LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM; see
hf_families.py).

  hf_reference.py reference --out DIR
      (a ctest fixture) writes, for each family F, under DIR/hf_F:
        single/     a model with random weights (randomize), by save_pretrained in float32 (Llama 3
                    also as sharded/: shards and model.safetensors.index.json);
        reference.safetensors  its logits on fixed tokens ("in.tokens", "out.logits");
        bf16/       the same model loaded in bfloat16 (from_pretrained), by save_pretrained;
        reference_bf16.safetensors  that model's logits computed in bfloat16 ("out.logits") and,
                    upcast, in float32 ("out.logits_f32"), on the same tokens;
        generate/ and generate.safetensors  the generation reference (hf_generation.py);
        train/ and train.safetensors  the training reference (hf_training.py).
  hf_reference.py logits --family F --model DIR --out FILE [--model DIR --out FILE ...]
      loads each DIR (a folder titan exported, in float32 or bfloat16) with from_pretrained,
      computing in float32, and writes its logits on the same tokens to the FILE given with it, in
      the same form; one process for several folders, as importing torch takes seconds.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_families import FAMILIES, from_pretrained, new_model, randomize, scale_logits, tokens  # noqa: E402
from hf_generation import generate  # noqa: E402
from hf_training import train  # noqa: E402
from make_reference import write_safetensors  # noqa: E402

# The final norm's scale for generation: it multiplies the logits, so the lead of each greedy
# token over the runner-up (0.05 at the least here) dwarfs rounding.
GENERATE_LOGIT_SCALE = 4.0


def logits_of(model, family):
    t = tokens(family)
    with torch.no_grad():
        return {"in.tokens": t, "out.logits": model(t).logits.float()}


def reference(out):
    for family in FAMILIES:
        root = os.path.join(out, "hf_" + family)
        model = new_model(family)
        randomize(model)
        model.save_pretrained(os.path.join(root, "single"))
        if family == "llama3":
            model.save_pretrained(os.path.join(root, "sharded"), max_shard_size="100KB")
        write_safetensors(os.path.join(root, "reference.safetensors"), logits_of(model, family), {})

        # From the folders rather than cast in place: a cast model's RoPE frequencies (a buffer)
        # would be rounded to bfloat16 too, which from_pretrained's are not.
        bf16 = os.path.join(root, "bf16")
        from_pretrained(family, os.path.join(root, "single"), torch.bfloat16).save_pretrained(bf16)
        ref = logits_of(from_pretrained(family, bf16, torch.bfloat16), family)
        ref["out.logits_f32"] = logits_of(from_pretrained(family, bf16), family)["out.logits"]
        write_safetensors(os.path.join(root, "reference_bf16.safetensors"), ref, {})

        scale_logits(model, GENERATE_LOGIT_SCALE)
        model.save_pretrained(os.path.join(root, "generate"))
        generate(family, model, root)

        train(family, root)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    ref = sub.add_parser("reference")
    ref.add_argument("--out", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("--family", required=True, choices=sorted(FAMILIES))
    lg.add_argument("--model", required=True, action="append")
    lg.add_argument("--out", required=True, action="append")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.command == "reference":
        reference(args.out)
    else:
        if len(args.model) != len(args.out):
            ap.error("give one --out per --model")
        for model, out in zip(args.model, args.out):
            write_safetensors(out, logits_of(from_pretrained(args.family, model), args.family), {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
