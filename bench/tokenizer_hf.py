#!/usr/bin/env python3
"""Times Hugging Face tokenizers for bench/tokenizer.cpp.

usage: RAYON_NUM_THREADS=n tokenizer_hf.py SPEC_JSON
SPEC_JSON: {"reps": r, "cases": [{"name", "tokenizer": a tokenizer.json, "corpus": a JSON file
holding the list of documents}]}. Each case runs encode_batch(documents, add_special_tokens=False)
once to warm up, then r times; the figure is the median. Rayon sizes its thread pool from
RAYON_NUM_THREADS when the first batch runs, so each thread count needs its own process.

Prints one JSON line on stdout: {"tokenizers": version, "threads": n, "results": {name:
{"seconds", "tokens"} or {"error"}}}.
"""
import json
import os
import statistics
import sys
import time


def main():
    spec = json.load(open(sys.argv[1]))
    try:
        import tokenizers
    except ImportError as e:
        print(json.dumps({"error": f"cannot import tokenizers ({e}); run make deps-test"}))
        return
    results = {}
    corpora = {}
    for case in spec["cases"]:
        try:
            tokenizer = tokenizers.Tokenizer.from_file(case["tokenizer"])
            docs = corpora.setdefault(case["corpus"], json.load(open(case["corpus"])))
            tokens = sum(len(e.ids) for e in tokenizer.encode_batch(docs, add_special_tokens=False))
            times = []
            for _ in range(spec["reps"]):
                start = time.perf_counter()
                tokenizer.encode_batch(docs, add_special_tokens=False)
                times.append(time.perf_counter() - start)
            results[case["name"]] = {"seconds": statistics.median(times), "tokens": tokens}
        except Exception as e:  # one failing case must not hide the others' figures
            results[case["name"]] = {"error": repr(e)}
        print(f"tokenizer_hf: {case['name']} done", file=sys.stderr)
    threads = int(os.environ.get("RAYON_NUM_THREADS") or os.cpu_count())
    print(json.dumps({"tokenizers": tokenizers.__version__, "threads": threads, "results": results}))


if __name__ == "__main__":
    main()
