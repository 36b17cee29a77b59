#!/usr/bin/env python3
"""Hugging Face transformers as the reference for titan's import and export of Llama 3, Qwen 3
and Qwen 3 MoE.

  hf_reference.py reference --out DIR
      (a ctest fixture) builds, for each family F of FAMILIES, a tiny model with random weights,
      writes it with save_pretrained (safetensors) as DIR/hf_F/single (Llama 3 also as
      DIR/hf_F/sharded: shards and model.safetensors.index.json), and its logits on fixed tokens
      as DIR/hf_F/reference.safetensors ("in.tokens", "out.logits"; metadata "reference" says
      which implementation computed them).
  hf_reference.py logits --family F --model DIR --out FILE
      loads DIR (a folder titan exported) as from_pretrained does and writes its logits on the
      same tokens to FILE, in the same form.

The configs exercise what titan must carry over: grouped-query attention, a non-default
rms_norm_eps and an intermediate_size of its own; Llama 3.1 RoPE scaling with factors other than
the defaults (so that low, middle and high frequencies are each treated differently at head_dim
16); Qwen 3's QK-norm with a head_dim that is not hidden_size / num_attention_heads, tied
embeddings (dense) and 4 experts of which 2 per token, renormalised (MoE).

Qwen3ForCausalLM and Qwen3MoeForCausalLM arrived in transformers 4.51, which needs torch >= 2;
Debian's torch 1.13 runs transformers 4.46 at most. Where transformers lacks them, the Qwen 3
folders are written and read by the PyTorch twin of tests/parity/qwen3_torch.py instead, under
the names and config.json keys of transformers' classes (QWEN3_NAMES below), as save_pretrained
and from_pretrained would.
"""
import argparse
import json
import os
import re
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_torch  # noqa: E402
from make_reference import write_safetensors  # noqa: E402

LLAMA3 = dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=256, max_position_embeddings=128,
              rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
              rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 2.0, "original_max_position_embeddings": 64})
# Every key titan writes is given, so that the twin's config.json holds what save_pretrained's does.
QWEN3 = dict(model_type="qwen3", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=24, vocab_size=256,
             max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=1000000.0, rope_scaling=None,
             hidden_act="silu", attention_bias=False, use_sliding_window=False, tie_word_embeddings=True)
QWEN3_MOE = dict(QWEN3, model_type="qwen3_moe", tie_word_embeddings=False, num_experts=4,
                 num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                 decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.01)
FAMILIES = {"llama3": ("LlamaForCausalLM", LLAMA3), "qwen3": ("Qwen3ForCausalLM", QWEN3),
            "qwen3_moe": ("Qwen3MoeForCausalLM", QWEN3_MOE)}

# The twin's names (TorchTitan's) -> transformers' for Qwen 3, as regular expressions; the
# stacked experts ("moe.experts.w1" [experts, out, in]) are split into one tensor per expert.
QWEN3_NAMES = [
    (r"tok_embeddings\.weight", "model.embed_tokens.weight"),
    (r"norm\.weight", "model.norm.weight"),
    (r"output\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attention\.w([qkvo])\.weight", r"model.layers.\1.self_attn.\2_proj.weight"),
    (r"layers\.(\d+)\.attention\.([qk])_norm\.weight", r"model.layers.\1.self_attn.\2_norm.weight"),
    (r"layers\.(\d+)\.attention_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (r"layers\.(\d+)\.ffn_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"layers\.(\d+)\.feed_forward\.w1\.weight", r"model.layers.\1.mlp.gate_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.w2\.weight", r"model.layers.\1.mlp.down_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.w3\.weight", r"model.layers.\1.mlp.up_proj.weight"),
    (r"layers\.(\d+)\.moe\.router\.gate\.weight", r"model.layers.\1.mlp.gate.weight"),
]
EXPERTS = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}


def tokens(config):
    gen = torch.Generator().manual_seed(1234)
    return torch.randint(0, config["vocab_size"], (2, 24), generator=gen)


def logits_of(model, config):
    t = tokens(config)
    with torch.no_grad():
        out = model(t)
    return {"in.tokens": t, "out.logits": (out if torch.is_tensor(out) else out.logits).float()}


def randomize(model):
    """Random weights everywhere, norms included: inits that leave norms at one would hide a
    swapped norm, and small weights would hide RoPE's layout."""
    gen = torch.Generator().manual_seed(42)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.2 * noise if name.endswith("norm.weight") else 0.08 * noise)


def transformers_class(family):
    """transformers' class of the family, or None where this transformers lacks it."""
    return getattr(transformers, FAMILIES[family][0], None)


# ---- the twin, where transformers has no Qwen 3 --------------------------------------------------

def twin_args(config):
    moe = None
    if config["model_type"] == "qwen3_moe":
        moe = qwen3_torch.MoEArgs(num_experts=config["num_experts"], top_k=config["num_experts_per_tok"],
                                  hidden_dim=config["moe_intermediate_size"],
                                  norm_topk_prob=config["norm_topk_prob"])
    return qwen3_torch.ModelArgs(
        dim=config["hidden_size"], n_layers=config["num_hidden_layers"], n_heads=config["num_attention_heads"],
        n_kv_heads=config["num_key_value_heads"], head_dim=config["head_dim"], ffn_dim=config["intermediate_size"],
        vocab_size=config["vocab_size"], norm_eps=config["rms_norm_eps"], rope_theta=config["rope_theta"],
        max_seq_len=config["max_position_embeddings"], tie_embeddings=config["tie_word_embeddings"], moe=moe)


EXPERT_STACK = re.compile(r"layers\.(\d+)\.moe\.experts\.(w[123])")


def hf_name(name):
    """transformers' name of a twin tensor other than the stacked experts."""
    hf = [re.sub(f"^{ours}$", theirs, name) for ours, theirs in QWEN3_NAMES if re.fullmatch(ours, name)]
    assert len(hf) == 1, f"no Hugging Face name for {name}"
    return hf[0]


def expert_name(layer, expert, w):
    return f"model.layers.{layer}.mlp.experts.{expert}.{EXPERTS[w]}.weight"


def twin_to_hf(state):
    out = {}
    for name, t in state.items():
        stack = EXPERT_STACK.fullmatch(name)
        if stack:
            for e in range(t.shape[0]):
                out[expert_name(stack.group(1), e, stack.group(2))] = t[e].contiguous()
        else:
            out[hf_name(name)] = t.contiguous()
    return out


def twin_from_hf(hf, args):
    """The twin holding HF state dict `hf`, which must have exactly Qwen 3's tensors."""
    twin = qwen3_torch.Transformer(args)
    expected = set(twin_to_hf(twin.state_dict()))
    assert expected == set(hf), f"tensors differ from Qwen 3's: {sorted(expected ^ set(hf))}"
    ours = {}
    for name, p in twin.state_dict().items():
        stack = EXPERT_STACK.fullmatch(name)
        if stack:
            ours[name] = torch.stack([hf[expert_name(stack.group(1), e, stack.group(2))] for e in range(p.shape[0])])
        else:
            ours[name] = hf[hf_name(name)]
    twin.load_state_dict(ours)
    return twin.eval()


def twin_save_pretrained(model, config, architecture, folder):
    os.makedirs(folder, exist_ok=True)
    save_file(twin_to_hf(model.state_dict()), os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(dict(config, architectures=[architecture], torch_dtype="float32"), f, indent=2)


def twin_from_pretrained(folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    return twin_from_hf(load_file(os.path.join(folder, "model.safetensors")), twin_args(config))


# ---- the commands ----------------------------------------------------------------------------------

def reference(out):
    for family, (architecture, config) in FAMILIES.items():
        root = os.path.join(out, "hf_" + family)
        os.makedirs(root, exist_ok=True)
        cls = transformers_class(family)
        if cls is None:
            model = qwen3_torch.Transformer(twin_args(config)).eval()
            randomize(model)
            twin_save_pretrained(model, config, architecture, os.path.join(root, "single"))
            used = "qwen3_torch.py (transformers " + transformers.__version__ + " has no " + architecture + ")"
        else:
            keys = {k: v for k, v in config.items() if k != "model_type"}
            model = cls(cls.config_class(**keys, attn_implementation="eager")).eval()
            randomize(model)
            model.save_pretrained(os.path.join(root, "single"), safe_serialization=True)
            if family == "llama3":
                model.save_pretrained(os.path.join(root, "sharded"), safe_serialization=True,
                                      max_shard_size="100KB")
            used = "transformers " + transformers.__version__ + " " + architecture
        write_safetensors(os.path.join(root, "reference.safetensors"), logits_of(model, config),
                          {"reference": used})


def logits(family, model_dir, out):
    cls = transformers_class(family)
    if cls is None:
        model = twin_from_pretrained(model_dir)
    else:
        model = cls.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager").eval()
    write_safetensors(out, logits_of(model, FAMILIES[family][1]), {})


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    ref = sub.add_parser("reference")
    ref.add_argument("--out", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("--family", required=True, choices=sorted(FAMILIES))
    lg.add_argument("--model", required=True)
    lg.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.command == "reference":
        reference(args.out)
    else:
        logits(args.family, args.model, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
