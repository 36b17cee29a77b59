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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax_cases  # noqa: E402
from attention_torch import visible  # noqa: E402 -- takes the array module: jax.numpy here


def build(jax, jnp, c):
    dtype = jnp.bfloat16 if c["variant"] == "bf16" else jnp.float32
    mask = visible(c, jnp)

    def attention(q, k, v):
        if mask is None:
            return jax.nn.dot_product_attention(q, k, v, is_causal=True)
        return jax.nn.dot_product_attention(q, k, v, mask=mask[None, None])

    def fwd_bwd(q, k, v, dout):
        out, vjp = jax.vjp(attention, q, k, v)
        return out, vjp(dout)

    shape = (c["batch"], c["seq"], c["heads"], c["head_dim"])
    keys = jax.random.split(jax.random.PRNGKey(7), 4)
    return fwd_bwd, tuple(jax.random.normal(key, shape).astype(dtype) for key in keys)


if __name__ == "__main__":
    sys.exit(jax_cases.run(build))
