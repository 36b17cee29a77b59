#!/usr/bin/env python3
"""PyTorch eager attention, forward + backward on the CPU, for bench/attention.cpp.

torch 1.13 has no scaled_dot_product_attention, so this is the eager formula models ran before it:
the [B, H, S, S] scores materialised, the mask applied with masked_fill, softmax, then the values.
It computes every score, masked or not.

Argument: a JSON file {"threads": n, "cases": [case, ...]}; each case has "name", "batch", "seq",
"heads", "head_dim", "mask" ({"kind": "causal"}, {"kind": "window", "left": w} or
{"kind": "document", "docs": n}) and the timing plan ("warmup", "reps", "min_time", as in
bench/torch_reference.py, whose timing this reuses). A call is out = attention(q, k, v), then
torch.autograd.grad(out, (q, k, v), dout).

Peak memory: the process's resident high-water mark (VmHWM, reset through /proc/self/clear_refs)
while the case's inputs are made and timed, less the resident size before: what the case added.

Prints one JSON line on stdout: {"torch", "threads", "blas", "results": {name: {"seconds",
"peak_bytes"} or {"error"}}}. Progress goes to stderr.
"""
import ctypes
import gc
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import environment, median_seconds, reset_peak_rss, start_torch, status_bytes  # noqa: E402


def visible(case, torch):
    s, m = case["seq"], case["mask"]
    q = torch.arange(s)[:, None]
    k = torch.arange(s)[None, :]
    causal = k <= q
    if m["kind"] == "causal":
        return causal
    if m["kind"] == "window":
        return causal & (k >= q - m["left"])
    if m["kind"] == "document":
        doc = torch.arange(s) * m["docs"] // s
        return causal & (doc[:, None] == doc[None, :])
    raise ValueError(f"unknown mask {m['kind']!r}")


def attention_call(case, torch):
    b, s, h, d = case["batch"], case["seq"], case["heads"], case["head_dim"]
    q, k, v = (torch.randn(b, s, h, d, requires_grad=True) for _ in range(3))
    dout = torch.randn(b, s, h, d)
    hidden = ~visible(case, torch)
    scale = d ** -0.5

    def call():
        scores = torch.matmul(q.transpose(1, 2), k.permute(0, 2, 3, 1)) * scale
        p = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        out = torch.matmul(p, v.transpose(1, 2)).transpose(1, 2)
        return torch.autograd.grad(out, (q, k, v), dout)

    return call


def main():
    request, torch = start_torch()
    if torch is None:
        return 0
    libc = ctypes.CDLL("libc.so.6")
    results = {}
    for case in request["cases"]:
        name = case["name"]
        gc.collect()
        libc.malloc_trim(0)  # so that the next case's growth starts from what is live
        before = status_bytes("VmRSS")
        reset_peak_rss()
        try:
            seconds = median_seconds(attention_call(case, torch), case)
            results[name] = {"seconds": seconds, "peak_bytes": status_bytes("VmHWM") - before}
            print(f"torch  {name:<36} {seconds * 1e3:10.1f} ms", file=sys.stderr, flush=True)
        except (RuntimeError, MemoryError, ValueError) as e:
            results[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"torch  {name}: {results[name]['error']}", file=sys.stderr, flush=True)
    print(json.dumps({**environment(torch), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
