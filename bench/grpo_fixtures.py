#!/usr/bin/env python3
"""Offline inputs of the GRPO benchmark: a tiny random Llama as a Hugging Face folder and an
addition task. No hub is reachable here, so both are made from nothing, deterministically.

  grpo_fixtures.py model DIR [--hidden 64 --layers 2 --heads 4 --kv-heads 2 --seed 0]
                             [--sft-data prompts.jsonl --sft-steps 300 --sft-lr 3e-3 --threads 1]
      config.json, model.safetensors, generation_config.json, tokenizer.json and
      tokenizer_config.json. The tokenizer is data/kjv_tokenizer's format without merges: a
      byte-level BPE whose ids 0-255 are the bytes, 256 <|begin_of_text|> (bos, prepended) and 257
      <|end_of_text|> (eos), so every digit is one token. titan's BpeTokenizer and transformers
      read it alike (bos first). Random weights, or with --sft-data trained that many steps
      (64 sums a step, AdamW) on "prompt answer<eos>", the loss on the answer and eos; one
      thread by default, the fastest for GEMMs this small (2000 steps: about a minute).
  grpo_fixtures.py addition DIR [--digits 2 --train 4096 --eval 256 --seed 0]
      DIR/prompts.jsonl and DIR/eval.jsonl, lines {"prompt": "12+34=", "answer": "46"}, no pair
      in both files. The tiny model learns 512 training sums by heart in 2000 supervised steps
      (97% reward) and gets 7% of the held-out ones; from 8000, 1500 steps reach 22% held out.

Needs transformers and tokenizers (.venv or .venv-rl).
"""
import argparse
import json
import os
import random

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def byte_alphabet():
    """GPT-2's byte-level spelling: byte b's one-character token, as kjv_tokenizer spells ids 0-255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelled, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelled[b] = chr(b)
        else:
            spelled[b] = chr(256 + extra)
            extra += 1
    return spelled


def save_tokenizer(folder):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {char: b for b, char in byte_alphabet().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    # Llama 3's: transformers prepends bos through the post-processor, titan through add_bos_token
    # below (it reads no post-processor), so both give the same ids.
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                      special_tokens=[(BOS, 256)])])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(BOS, special=True, normalized=False),
                                  AddedToken(EOS, special=True, normalized=False)])
    assert tokenizer.token_to_id(BOS) == 256 and tokenizer.token_to_id(EOS) == 257
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
                   "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False}, f,
                  indent=2)
    return 258


def make_model(args):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    os.makedirs(args.dir, exist_ok=True)
    vocab = save_tokenizer(args.dir)
    config = LlamaConfig(vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.intermediate or args.hidden * 4,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, max_position_embeddings=args.context,
                         rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                         bos_token_id=256, eos_token_id=257, pad_token_id=None)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=256, eos_token_id=257)
    if args.sft_data:
        supervise(model, args)
    model.save_pretrained(args.dir)
    print(f"grpo_fixtures: a {sum(p.numel() for p in model.parameters())}-parameter Llama in {args.dir}")


def supervise(model, args):
    """A few steps of supervised training on bos prompt answer eos (the loss on answer and eos
    only), so that GRPO starts from a model that is sometimes right: the random one never is."""
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.dir)
    with open(args.sft_data) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    prompts = tokenizer([r["prompt"] for r in rows])["input_ids"]
    answers = tokenizer([r["answer"] for r in rows], add_special_tokens=False)["input_ids"]
    width = max(len(p) + len(a) + 1 for p, a in zip(prompts, answers))
    ids = torch.full((len(rows), width), 257)
    labels = torch.full((len(rows), width), -100)
    for i, (p, a) in enumerate(zip(prompts, answers)):
        seq = p + a + [257]
        ids[i, :len(seq)] = torch.tensor(seq)
        labels[i, len(p):len(seq)] = torch.tensor(a + [257])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.sft_lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(args.seed)
    model.train()
    for step in range(args.sft_steps):
        pick = torch.randint(0, len(rows), (64,), generator=generator)
        loss = model(input_ids=ids[pick], labels=labels[pick]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % 100 == 0 or step + 1 == args.sft_steps:
            print(f"grpo_fixtures: supervised step {step + 1}/{args.sft_steps}: loss {loss.item():.4f}")
    model.eval()


def make_addition(args):
    rng = random.Random(args.seed)
    top = 10 ** args.digits
    pairs = rng.sample(range(top * top), args.train + args.eval)
    os.makedirs(args.dir, exist_ok=True)
    for name, chosen in (("prompts.jsonl", pairs[:args.train]), ("eval.jsonl", pairs[args.train:])):
        with open(os.path.join(args.dir, name), "w") as f:
            for pair in chosen:
                a, b = divmod(pair, top)
                f.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n")
    print(f"grpo_fixtures: {args.train} training and {args.eval} held-out {args.digits}-digit sums in {args.dir}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="kind", required=True)
    model = kinds.add_parser("model", help="a tiny random Llama with its tokenizer")
    model.add_argument("dir")
    model.add_argument("--hidden", type=int, default=64)
    model.add_argument("--intermediate", type=int, default=0, help="the FFN's width (default: 4 x hidden)")
    model.add_argument("--layers", type=int, default=2)
    model.add_argument("--heads", type=int, default=4)
    model.add_argument("--kv-heads", type=int, default=2)
    model.add_argument("--context", type=int, default=128)
    model.add_argument("--seed", type=int, default=0)
    model.add_argument("--sft-data", help="a prompts.jsonl to train it on first (default: left random)")
    model.add_argument("--sft-steps", type=int, default=300)
    model.add_argument("--sft-lr", type=float, default=3e-3)
    model.add_argument("--threads", type=int, default=1, help="torch threads of the supervised steps")
    addition = kinds.add_parser("addition", help="prompts.jsonl and eval.jsonl of sums")
    addition.add_argument("dir")
    addition.add_argument("--digits", type=int, default=2)
    addition.add_argument("--train", type=int, default=4096)
    addition.add_argument("--eval", type=int, default=256)
    addition.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.kind == "model":
        make_model(args)
    else:
        if args.train + args.eval > 10 ** (2 * args.digits):
            parser.error(f"--train + --eval = {args.train + args.eval} is more than the "
                         f"{10 ** (2 * args.digits)} distinct {args.digits}-digit pairs")
        make_addition(args)


if __name__ == "__main__":
    main()
