#!/usr/bin/env python3
"""Attention of bench/attention.cpp --graph in plain JAX, jitted whole (forward + backward for a
fixed output gradient): jax.nn.dot_product_attention on [B, S, H, D] inputs, is_causal for the
causal mask and a boolean [S, S] mask otherwise (a window of `left` keys, or `docs` packed
documents of equal length, causal within each), as bench/attention_torch.py builds them. The
reference for titan's graph mode on attention: what XLA alone makes of the same program on the CPU
(its implementation="xla", the one it has there, materialises the [S, S] scores).

Argument: a JSON file {"cases": [{"name", "batch", "seq", "heads", "head_dim", "mask",
"variant"}], "threads", "reps"}; variant "f32", or "bf16" (bf16 inputs; softmax in f32 inside
XLA's lowering). Each case compiles ahead of time, runs once to warm up, then `reps` timed calls.
Prints one JSON line on stdout: {"jax_version", "jaxlib", "threads", "results": {name: {"seconds",
"compile_seconds"}}} or {"error"}. Progress goes to stderr.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from moe_jax import use_threads  # noqa: E402


def visible(jnp, case):
    """[S, S] bool, True where query row may see key column; None for causal."""
    s, m = case["seq"], case["mask"]
    if m["kind"] == "causal":
        return None
    q = jnp.arange(s)[:, None]
    k = jnp.arange(s)[None, :]
    causal = k <= q
    if m["kind"] == "window":
        return causal & (k >= q - m["left"])
    if m["kind"] == "document":
        doc = jnp.arange(s) * m["docs"] // s
        return causal & (doc[:, None] == doc[None, :])
    raise ValueError(f"unknown mask {m['kind']!r}")


def main():
    with open(sys.argv[1]) as f:
        request = json.load(f)
    use_threads(int(request.get("threads", 0)))
    try:
        import jax
        import jax.numpy as jnp
        import jaxlib
    except ImportError as e:
        print(json.dumps({"error": f"JAX is not installed ({e}); run scripts/setup_jax.sh"}))
        return 0
    jax.config.update("jax_platforms", "cpu")
    results = {}
    for c in request["cases"]:
        dtype = jnp.bfloat16 if c["variant"] == "bf16" else jnp.float32
        mask = visible(jnp, c)

        def attention(q, k, v):
            if mask is None:
                return jax.nn.dot_product_attention(q, k, v, is_causal=True)
            return jax.nn.dot_product_attention(q, k, v, mask=mask[None, None])

        def fwd_bwd(q, k, v, dout):
            out, vjp = jax.vjp(attention, q, k, v)
            return out, vjp(dout)

        shape = (c["batch"], c["seq"], c["heads"], c["head_dim"])
        keys = jax.random.split(jax.random.PRNGKey(7), 4)
        q, k, v, dout = (jax.random.normal(key, shape).astype(dtype) for key in keys)
        start = time.perf_counter()
        step = jax.jit(fwd_bwd).lower(q, k, v, dout).compile()
        compile_seconds = time.perf_counter() - start
        jax.block_until_ready(step(q, k, v, dout))
        seconds = []
        for _ in range(int(request["reps"])):
            start = time.perf_counter()
            jax.block_until_ready(step(q, k, v, dout))
            seconds.append(time.perf_counter() - start)
        print(f"jax {c['name']}: {sorted(seconds)[len(seconds) // 2] * 1e3:.1f} ms (compile {compile_seconds:.1f} s)",
              file=sys.stderr, flush=True)
        results[c["name"]] = {"seconds": seconds, "compile_seconds": compile_seconds}
    print(json.dumps({"jax_version": jax.__version__, "jaxlib": jaxlib.__version__,
                      "threads": len(os.sched_getaffinity(0)), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
