#!/usr/bin/env python3
"""The MoE layer of bench/moe.cpp written in plain JAX and jitted whole (forward + backward for a
fixed output gradient), the reference for titan's graph mode on that layer: what XLA alone makes
of the same program. The layer is titan's nn::moe::MoE and Hugging Face's Qwen3MoeSparseMoeBlock:
softmax router, top-k renormalised, the (token, choice) pairs sorted by expert (a stable argsort),
each expert's SwiGLU over its rows through jax.lax.ragged_dot (a grouped matmul whose group sizes
are data: JAX's dropless MoE), the rows put back and summed with the routing weights.

Argument: a JSON file {"cases": [{"name", "tokens", "dim", "hidden", "experts", "top_k",
"variant"}], "threads", "reps"}; variant "f32", or "bf16" (bf16 operands with f32 accumulation,
preferred_element_type, as titan's autocast and torch.autocast multiply; router and softmax in
f32). Each case compiles ahead of time (compile_seconds), runs once to warm up, then `reps` timed
calls. Prints one JSON line on stdout: {"jax_version", "jaxlib", "threads", "results": {name:
{"seconds": [...], "compile_seconds"}}} or {"error"}. Progress goes to stderr.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax_cases  # noqa: E402


def make_layer(jax, jnp, c, bf16):
    tokens, k, experts = c["tokens"], c["top_k"], c["experts"]

    def mm(a, b):
        if bf16:
            return jnp.matmul(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        return jnp.matmul(a, b, precision="highest")

    def grouped(rows, w, sizes):
        # rows [n, in] in expert order, w [experts, in, out]: each group's rows times its matrix.
        if bf16:
            return jax.lax.ragged_dot(rows.astype(jnp.bfloat16), w.astype(jnp.bfloat16), sizes,
                                      preferred_element_type=jnp.float32)
        return jax.lax.ragged_dot(rows, w, sizes, precision="highest")

    def layer(params, x):
        scores = jax.nn.softmax(mm(x, params["gate"]), axis=-1)
        weights, ids = jax.lax.top_k(scores, k)
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
        flat = ids.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        sizes = jnp.bincount(flat, length=experts).astype(jnp.int32)
        rows = x[order // k]
        h = jax.nn.silu(grouped(rows, params["w1"], sizes)) * grouped(rows, params["w3"], sizes)
        out_rows = grouped(h, params["w2"], sizes)
        per_pair = jnp.zeros_like(out_rows).at[order].set(out_rows)
        return jnp.sum(per_pair.reshape(tokens, k, -1) * weights[..., None], axis=1)

    def fwd_bwd(params, x, dout):
        out, vjp = jax.vjp(layer, params, x)
        return out, vjp(dout)

    return fwd_bwd


def build(jax, jnp, c):
    d, h, e = c["dim"], c["hidden"], c["experts"]
    key = jax.random.split(jax.random.PRNGKey(5), 6)
    params = {"gate": jax.random.normal(key[0], (d, e)) * d ** -0.5,
              "w1": jax.random.normal(key[1], (e, d, h)) * d ** -0.5,
              "w3": jax.random.normal(key[2], (e, d, h)) * d ** -0.5,
              "w2": jax.random.normal(key[3], (e, h, d)) * h ** -0.5}
    x = jax.random.normal(key[4], (c["tokens"], d))
    dout = jax.random.normal(key[5], (c["tokens"], d))
    return make_layer(jax, jnp, c, c["variant"] == "bf16"), (params, x, dout)


if __name__ == "__main__":
    sys.exit(jax_cases.run(build))
