#!/usr/bin/env python3
"""Writes data/sft/addition_{train,val}.jsonl: two-digit additions as prompt/completion rows
({"prompt": "12+34=", "completion": "46"}), the sample data of configs/sft/debug.toml.

The pairs come from a fixed linear congruential generator, not Python's `random`, so every Python
gives the same bytes. The validation rows are pairs the training rows do not hold.
"""
import json
import pathlib


def pairs():
    state = 12345
    seen = set()
    while True:
        # Numerical Recipes' 32-bit LCG; the high bits are the better ones.
        state = (1664525 * state + 1013904223) % 2**32
        a = (state >> 16) % 90 + 10
        state = (1664525 * state + 1013904223) % 2**32
        b = (state >> 16) % 90 + 10
        if (a, b) not in seen:
            seen.add((a, b))
            yield a, b


def main():
    out = pathlib.Path(__file__).resolve().parent.parent / "data" / "sft"
    out.mkdir(parents=True, exist_ok=True)
    gen = pairs()
    for name, n in (("addition_train.jsonl", 400), ("addition_val.jsonl", 100)):
        with open(out / name, "w") as f:
            for _ in range(n):
                a, b = next(gen)
                f.write(json.dumps({"prompt": f"{a}+{b}=", "completion": str(a + b)}) + "\n")


if __name__ == "__main__":
    main()
