#!/usr/bin/env python3
"""Writes the worked example's task data: exact problems that a small model learns on the CPU.

    scripts/make_task_data.py --task addition --digits 3 --out DIR [--seed 0] [--sft N] [--prompts N] [--eval N]
    scripts/make_task_data.py --task sort --letters 5 --out DIR

Tasks:
  addition  "123+45=" -> "168": two operands of up to --digits digits each.
  sort      "sort dbca=" -> "abcd": --letters letters from a to z (repeats allowed), sorted.
Files in DIR, one JSON object a line:
  sft.jsonl      {"prompt", "completion"} for supervised fine-tuning; the completion is the answer
                 alone (the tokenizer appends eos).
  prompts.jsonl  {"prompt", "answer"}: GRPO's prompts.
  eval.jsonl     {"prompt", "answer"}: held out, for the evaluation.
No problem appears twice, in one file or across them. The same arguments write the same bytes.
Exit status: 0 written, 2 bad arguments (more problems asked for than the task has).
"""
import argparse
import json
import random
import string
from pathlib import Path


def addition(index, digits):
    a, b = divmod(index, 10**digits)
    return f"{a}+{b}=", str(a + b)


def sort(index, letters):
    word = ""
    for _ in range(letters):
        index, letter = divmod(index, 26)
        word += string.ascii_lowercase[letter]
    return f"sort {word}=", "".join(sorted(word))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=["addition", "sort"], required=True)
    parser.add_argument("--digits", type=int, default=3, help="addition: the most digits of an operand")
    parser.add_argument("--letters", type=int, default=5, help="sort: the letters of a word")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (created if absent)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sft", type=int, default=4000, help="problems in sft.jsonl")
    parser.add_argument("--prompts", type=int, default=1000, help="problems in prompts.jsonl")
    parser.add_argument("--eval", type=int, default=200, help="problems in eval.jsonl")
    args = parser.parse_args()

    size = args.digits if args.task == "addition" else args.letters
    if size < 1:
        parser.error(f"--{'digits' if args.task == 'addition' else 'letters'} = {size} must be at least 1")
    if min(args.sft, args.prompts, args.eval) < 0:
        parser.error("--sft, --prompts and --eval must be at least 0")
    problems = 10 ** (2 * size) if args.task == "addition" else 26**size
    wanted = args.sft + args.prompts + args.eval
    if wanted > problems:
        parser.error(f"{wanted} problems asked for (--sft + --prompts + --eval) but {args.task} of size {size} "
                     f"has only {problems} distinct ones; ask for fewer or raise the size")

    # Distinct indices into the task's problems, so the files are disjoint by construction.
    make = addition if args.task == "addition" else sort
    drawn = [make(i, size) for i in random.Random(args.seed).sample(range(problems), wanted)]
    evaluation, grpo, sft = drawn[:args.eval], drawn[args.eval:][:args.prompts], drawn[args.eval + args.prompts:]

    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows, field in [("sft", sft, "completion"), ("prompts", grpo, "answer"), ("eval", evaluation, "answer")]:
        with open(args.out / f"{name}.jsonl", "w", encoding="utf-8", newline="\n") as f:
            for prompt, answer in rows:
                f.write(json.dumps({"prompt": prompt, field: answer}) + "\n")
    print(f"{args.out}: {len(sft)} sft, {len(grpo)} prompts, {len(evaluation)} eval ({args.task}, size {size})")


if __name__ == "__main__":
    main()
