#!/usr/bin/env python3
"""The reference of bench/generate.cpp: Hugging Face transformers 5 generating greedily with its KV
cache, on models built from the same config.json that titan's Hugging Face export writes (random
weights: only the speed is compared).

Argument: a JSON file {"threads", "variants": ["eager", "eager bf16", ...], "cases": [{"name",
"config" (config.json's dict), "prompt", "new_tokens", "reps"}]}. Per case and variant: the prefill
is model(prompt ids, past_key_values=DynamicCache()) over `prompt` random ids, timed alone; the
decoding is `new_tokens` steps of model(last token, past_key_values=cache) fed its own argmax, as
generate() does at temperature 0. "bf16" runs both under torch.autocast("cpu", bfloat16), the
weights float32 as titan's are. Each is timed `reps` times after a warm-up; the figures are the
medians, as tokens per second.

Prints one JSON line on stdout: {environment(), "results": {name: {variant: {"prefill_tokens_per_second",
"decode_tokens_per_second"}}}}, or {"error"}. Progress goes to stderr.
"""
import contextlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    sys.path.insert(0, HERE)
    from torch_reference import environment, start_torch

    request, torch = start_torch()
    if torch is None:
        return 0
    try:
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache
    except ImportError as e:
        print(json.dumps({"error": f"cannot import transformers: {e}"}))
        return 0

    results = {}
    for case in request["cases"]:
        config = AutoConfig.for_model(**case["config"])
        with torch.device("cpu"):
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
        vocab = case["config"]["vocab_size"]
        gen = torch.Generator().manual_seed(0)
        prompt = torch.randint(0, vocab, (1, case["prompt"]), generator=gen)
        results[case["name"]] = {}
        for variant in request["variants"]:
            precision = (torch.autocast("cpu", dtype=torch.bfloat16) if variant.endswith("bf16")
                         else contextlib.nullcontext())

            def run():
                cache = DynamicCache(config=config)
                t0 = time.perf_counter()
                logits = model(prompt, past_key_values=cache, use_cache=True).logits
                prefill = time.perf_counter() - t0
                t0 = time.perf_counter()
                token = logits[:, -1:].argmax(-1)
                for _ in range(case["new_tokens"] - 1):
                    logits = model(token, past_key_values=cache, use_cache=True).logits
                    token = logits[:, -1:].argmax(-1)
                return prefill, time.perf_counter() - t0

            with torch.inference_mode(), precision:
                run()
                times = [run() for _ in range(case["reps"])]
            prefill = statistics.median(t[0] for t in times)
            decode = statistics.median(t[1] for t in times)
            results[case["name"]][variant] = {
                "prefill_tokens_per_second": case["prompt"] / prefill,
                # The first new token comes from the prefill's logits, as in titan's figure.
                "decode_tokens_per_second": (case["new_tokens"] - 1) / decode}
            print(f"torch {variant} {case['name']}: prefill {case['prompt'] / prefill:.1f} tokens/s, "
                  f"decode {(case['new_tokens'] - 1) / decode:.1f} tokens/s", file=sys.stderr)
        del model
    print(json.dumps({**environment(torch), "transformers": transformers.__version__, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
