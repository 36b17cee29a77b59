#!/usr/bin/env python3
"""PyTorch 2 attention, forward + backward on the CPU, for bench/attention.cpp.

What a PyTorch 2 user writes: F.scaled_dot_product_attention on [B, H, S, D] views of the
[B, S, H, D] inputs, is_causal=True for the causal mask and a boolean attn_mask ([S, S], True =
visible) for the others. Each case runs as every variant it names (bench/torch_reference.py:
eager, torch.compile, each in f32 and under bf16 autocast); the compiled function is the attention
alone, its gradients taken outside it. The compiled attention is one function for every case, with
torch.compile's default automatic dynamic shapes, so that the 30 cases compile a few graphs per
mask and dtype rather than one each (at 10-20 s a compile on 2 cores, one each would take longer
than the timings); the graph is the SDPA call either way.

Argument: a JSON file {"threads": n, "cases": [case, ...]}; each case has "name", "batch", "seq",
"heads", "head_dim", "mask" ({"kind": "causal"}, {"kind": "window", "left": w} or
{"kind": "document", "docs": n}), "variants" and the timing plan ("warmup", "reps", "min_time", as
in bench/torch_reference.py, whose timing this reuses). A call is out = attention(q, k, v), then
torch.autograd.grad(out, (q, k, v), dout). Optional: "mode" "fwd" (the forward alone, under
torch.no_grad()) or "fwd_bwd" (the default), and "bf16": "inputs", under which the bf16 variants
run SDPA on bf16 q, k, v and dout (what a bf16 model passes it) rather than f32 ones under autocast.

Peak memory: the process's resident high-water mark (VmHWM, reset through /proc/self/clear_refs)
while the variant's inputs are made and timed, less the resident size before: what it added.

Prints one JSON line on stdout: {environment(), "results": {name: {variant: {"seconds",
"first_call_seconds", "peak_bytes"} or {"error"}}}}. Progress goes to stderr.
"""
import ctypes
import gc
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import environment, measure, reset_peak_rss, start_torch, status_bytes, variant_fn  # noqa: E402


def visible(case, torch):
    """[S, S] bool, True where query row may see key column; None for causal (is_causal instead)."""
    s, m = case["seq"], case["mask"]
    if m["kind"] == "causal":
        return None
    q = torch.arange(s)[:, None]
    k = torch.arange(s)[None, :]
    causal = k <= q
    if m["kind"] == "window":
        return causal & (k >= q - m["left"])
    if m["kind"] == "document":
        doc = torch.arange(s) * m["docs"] // s
        return causal & (doc[:, None] == doc[None, :])
    raise ValueError(f"unknown mask {m['kind']!r}")


def attention_call(case, torch):
    b, s, h, d = case["batch"], case["seq"], case["heads"], case["head_dim"]
    variant = case["variant"]
    bf16_inputs = case.get("bf16") == "inputs" and variant.endswith("bf16")
    dtype = torch.bfloat16 if bf16_inputs else torch.float32
    if bf16_inputs:
        variant = variant.removesuffix(" bf16")  # the inputs are bf16 already: no autocast
    q, k, v = (torch.randn(b, s, h, d, dtype=dtype, requires_grad=True) for _ in range(3))
    dout = torch.randn(b, s, h, d, dtype=dtype)
    mask = visible(case, torch)
    F = torch.nn.functional

    def attend(q, k, v):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=mask, is_causal=mask is None)
        return out.transpose(1, 2)

    attend = variant_fn(attend, variant, torch, dynamic=None)
    if case.get("mode", "fwd_bwd") == "fwd":
        def forward():
            with torch.no_grad():
                return attend(q, k, v)
        return forward
    return lambda: torch.autograd.grad(attend(q, k, v), (q, k, v), dout)


def main():
    request, torch = start_torch()
    if torch is None:
        return 0
    libc = ctypes.CDLL("libc.so.6")
    # Each mask kind and dtype holds a static and a dynamic entry: more than the default limit of 8,
    # past which torch.compile would fall back to eager without a word.
    torch._dynamo.config.recompile_limit = 64
    results = {}
    for case in request["cases"]:
        name = case["name"]
        results[name] = {}
        for variant in case["variants"]:
            label = f"{name} [{variant}]"
            gc.collect()
            libc.malloc_trim(0)  # so that this one's growth starts from what is live
            before = status_bytes("VmRSS")
            reset_peak_rss()
            try:
                r = measure(lambda: attention_call({**case, "variant": variant}, torch), case)
                r["peak_bytes"] = status_bytes("VmHWM") - before
                results[name][variant] = r
                print(f"torch  {label:<44} {r['seconds'] * 1e3:10.1f} ms (first call "
                      f"{r['first_call_seconds']:.1f} s)", file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001 -- inductor raises its own types; the case is reported
                results[name][variant] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
                print(f"torch  {label}: {results[name][variant]['error']}", file=sys.stderr, flush=True)
    print(json.dumps({**environment(torch), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
