#!/usr/bin/env python3
"""One JAX round of bench/train_step.cpp: the Llama 3 step of bench/train_step_torch.py written in
plain JAX and jitted whole, the way a JAX user runs XLA on the CPU, timed and measured the way the
other rounds are. It is the reference for titan's graph mode, which hands XLA a program too.

Argument: the JSON file bench/train_step_torch.py reads, with "variant" "f32" or "bf16". The step:
forward (RMSNorm, RoPE on Meta's interleaved pairs with Llama 3.1 scaling, GQA causal attention
through jax.nn.dot_product_attention, SwiGLU; the layers under lax.scan over stacked weights) ->
cross-entropy -> gradients -> clipping to global norm 1 -> AdamW (lr 8e-4, betas (0.9, 0.95),
eps 1e-8, weight decay 0.1 on every parameter, as torch.optim.AdamW on model.parameters() does),
in one jax.jit with the parameters and the optimizer state donated. "bf16" gives the matmuls
bf16 operands with f32 accumulation (preferred_element_type); weights, norms, softmax and the
loss stay f32. The first step traces and compiles (a warm-up step, out of the timings).

"device" (default "cpu"; "cuda" for bench_train_step --device=cuda) picks JAX's platform. f32
matmuls run at precision "highest" (no TF32 on GPUs), as titan's and torch's f32 do; there the
layers are rematerialised in the backward (jax.checkpoint), as titan's scan does.

"mesh" (optional, {"dp_shard": s, "tp": t}) splits the step over s x t CPU devices of this process
(XLA_FLAGS' host device count), as titan's graph mode splits its own: every parameter and moment
FSDP-sharded over "dp_shard" along its first dim after the layers' that divides, Megatron's plan
on "tp" (wq, wk, wv, w1, w3 and the output column-wise, wo and w2 row-wise, the embedding over the
vocabulary), the batch over "dp_shard", and the residual stream between blocks kept so
(with_sharding_constraint; along the sequence over "tp" too where the mesh says
"sequence_parallel": true); "batch" is then the global batch; "hlo_path", if given, receives the
optimized HLO text of the compiled step. It is the reference of bench/graph_parallel.cpp.

Prints one JSON line on stdout: {"jax_version", "xla", "threads", "variant", "attention", "step_seconds",
"first_step_seconds", "compile_seconds", "losses", "rss_baseline", "rss_peak"} (bytes), or
{"error"}. Progress goes to stderr.
"""
import ctypes
import gc
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from jax_cases import use_threads  # noqa: E402
from torch_reference import reset_peak_rss, status_bytes  # noqa: E402 -- plain Python, no torch

LR, BETA1, BETA2, EPS, WEIGHT_DECAY, MAX_NORM = 8e-4, 0.9, 0.95, 1e-8, 0.1, 1.0
NORM_EPS, ROPE_THETA = 1e-5, 500000.0


def rope_table(head_dim, seq):
    """cos and sin [seq, head_dim / 2] of bench/llama3_torch.py's rope_table (Llama 3.1 scaling),
    in float64 then float32 as there."""
    import numpy as np
    factor, low, high, orig = 8.0, 1.0, 4.0, 8192.0
    freqs = []
    for i in range(head_dim // 2):
        f = ROPE_THETA ** (-(2 * i) / head_dim)
        wavelen = 2 * math.pi / f
        if wavelen > orig / low:
            f /= factor
        elif wavelen >= orig / high:
            smooth = (orig / wavelen - low) / (high - low)
            f = (1 - smooth) * f / factor + smooth * f
        freqs.append(f)
    angles = np.outer(np.arange(seq, dtype=np.float64), np.array(freqs))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def init_params(jax, jnp, c, seed):
    """TorchTitan's scheme with the model's shapes (bench/llama3_torch.py init_weights): what the
    first loss depends on. Linear weights are stored [in, out], so x @ w needs no transpose."""
    d, layers, hd = c["dim"], c["n_layers"], c["dim"] // c["n_heads"]
    q, kv, f, v = c["n_heads"] * hd, c["n_kv_heads"] * hd, c["ffn_dim"], c["vocab_size"]
    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 16))
    # Depth-scaled std of wo, w2, w3, per layer, broadcast over each layer's [in, out]; those are cut
    # at 2 std rather than at 2 (no draw reaches 2 at std 0.02 either).
    depth = jnp.array([0.02 / math.sqrt(2 * (i + 1)) for i in range(layers)], jnp.float32)[:, None, None]

    def trunc(shape, std, bound=2.0):
        """Normal(0, std) cut at +-bound, as nn.init.trunc_normal_(w, 0, std, -bound, bound)."""
        return std * jax.random.truncated_normal(next(keys), -bound / std, bound / std, shape, jnp.float32)

    out_std = d ** -0.5
    return {
        "tok_embeddings": jax.random.normal(next(keys), (v, d), jnp.float32),
        "layers": {
            "attention_norm": jnp.ones((layers, d), jnp.float32),
            "wq": trunc((layers, d, q), 0.02),
            "wk": trunc((layers, d, kv), 0.02),
            "wv": trunc((layers, d, kv), 0.02),
            "wo": trunc((layers, q, d), 1.0) * depth,
            "ffn_norm": jnp.ones((layers, d), jnp.float32),
            "w1": trunc((layers, d, f), 0.02),
            "w2": trunc((layers, f, d), 1.0) * depth,
            "w3": trunc((layers, d, f), 1.0) * depth,
        },
        "norm": jnp.ones((d,), jnp.float32),
        "output": trunc((d, v), out_std, 3 * out_std),
    }


# Which dim of each weight (stored [in, out], stacked [layers, ...]) the tensor-parallel plan splits.
TP_DIMS = {"tok_embeddings": 0, "output": 1, "wq": 2, "wk": 2, "wv": 2, "w1": 2, "w3": 2, "wo": 1, "w2": 1}


def shard_params(jax, params, mesh):
    """NamedShardings for `params` on `mesh` (axes "s" = dp_shard, "t" = tp), as titan's graph mode
    lays them out (train/graph_mode/graph_sharding.cpp parameter_sharding)."""
    from jax.sharding import NamedSharding, PartitionSpec
    s_size, t_size = mesh.shape["s"], mesh.shape["t"]

    def spec(name, shape, stacked):
        dims = [None] * len(shape)
        split = TP_DIMS.get(name) if t_size > 1 else None
        if split is not None:
            dims[split] = "t"
        if s_size > 1:
            first = 1 if stacked else 0
            fsdp = next((d for d in range(first, len(shape)) if d != split and shape[d] % s_size == 0), None)
            if fsdp is None and split is not None and shape[split] % (s_size * t_size) == 0:
                dims[split] = ("t", "s")
            elif fsdp is not None:
                dims[fsdp] = "s"
        return NamedSharding(mesh, PartitionSpec(*dims))

    return {name: ({k: spec(k, v.shape, True) for k, v in value.items()} if name == "layers"
                   else spec(name, value.shape, False)) for name, value in params.items()}


def make_step(jax, jnp, c, bf16, remat, mesh=None, sequence_parallel=False, attention=None):
    b, s = c["batch"], c["seq"]
    n_heads, n_kv, hd = c["n_heads"], c["n_kv_heads"], c["dim"] // c["n_heads"]
    cos, sin = (jnp.asarray(t)[None, :, None, :] for t in rope_table(hd, s))
    lowp = jnp.bfloat16 if bf16 else jnp.float32

    def mm(x, w):
        return jnp.matmul(x.astype(lowp), w.astype(lowp), preferred_element_type=jnp.float32)

    def rms_norm(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + NORM_EPS) * w

    def rope(x):
        pairs = x.reshape(*x.shape[:-1], hd // 2, 2)
        even, odd = pairs[..., 0], pairs[..., 1]
        return jnp.stack((even * cos - odd * sin, even * sin + odd * cos), axis=-1).reshape(x.shape)

    def keep(h):
        if mesh is None:
            return h
        from jax.sharding import NamedSharding, PartitionSpec
        seq = "t" if sequence_parallel else None
        return jax.lax.with_sharding_constraint(h, NamedSharding(mesh, PartitionSpec("s", seq, None)))

    def block(h, p):
        h = keep(h)
        x = rms_norm(h, p["attention_norm"])
        q = rope(mm(x, p["wq"]).reshape(b, s, n_heads, hd))
        k = rope(mm(x, p["wk"]).reshape(b, s, n_kv, hd))
        v = mm(x, p["wv"]).reshape(b, s, n_kv, hd)
        # XLA's implementation takes the scores in f32 whatever the operands' type; "cudnn" is
        # cuDNN's flash attention (bf16 on a GPU).
        att = jax.nn.dot_product_attention(q.astype(lowp), k.astype(lowp), v.astype(lowp), is_causal=True,
                                           implementation=attention)
        h = h + mm(att.reshape(b, s, n_heads * hd), p["wo"])
        x = rms_norm(h, p["ffn_norm"])
        return keep(h + mm(jax.nn.silu(mm(x, p["w1"])) * mm(x, p["w3"]), p["w2"])), None

    def loss_fn(params, inputs, labels):
        h = params["tok_embeddings"][inputs]
        h, _ = jax.lax.scan(jax.checkpoint(block) if remat else block, h, params["layers"])
        logits = mm(rms_norm(h, params["norm"]), params["output"])
        picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)

    def step(params, opt, inputs, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, inputs, labels)
        leaves = jax.tree_util.tree_leaves(grads)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in leaves))
        # torch.nn.utils.clip_grad_norm_'s coefficient.
        scale = jnp.minimum(1.0, MAX_NORM / (norm + 1e-6))
        t = opt["count"] + 1
        m = jax.tree_util.tree_map(lambda m, g: BETA1 * m + (1 - BETA1) * scale * g, opt["m"], grads)
        v = jax.tree_util.tree_map(lambda v, g: BETA2 * v + (1 - BETA2) * (scale * g) ** 2, opt["v"], grads)
        c1, c2 = 1 - BETA1 ** t, 1 - BETA2 ** t

        def update(p, m, v):
            return p * (1 - LR * WEIGHT_DECAY) - LR * (m / c1) / (jnp.sqrt(v / c2) + EPS)

        params = jax.tree_util.tree_map(update, params, m, v)
        return params, {"m": m, "v": v, "count": t}, loss, norm

    return jax.jit(step, donate_argnums=(0, 1))


def main():
    with open(sys.argv[1]) as f:
        request = json.load(f)
    use_threads(int(request["threads"]))
    device = request.get("device", "cpu")
    layout = request.get("mesh")
    if layout:
        # Before jax loads: the host platform's device count is read once.
        devices = int(layout["dp_shard"]) * int(layout["tp"])
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={devices}").strip()
    # Before jax loads: its platform is chosen once.
    os.environ["JAX_PLATFORMS"] = device
    try:
        import jax
        import jax.extend.backend
        import jax.numpy as jnp
        import jaxlib
        import numpy as np
    except ImportError as e:
        print(json.dumps({"error": f"cannot import jax with {sys.executable}: {e} (run scripts/setup_jax.sh)"}))
        return 0
    variant, c = request["variant"], request["config"]
    if variant not in ("f32", "bf16"):
        print(json.dumps({"error": f"variant is f32 or bf16, got {variant!r}"}))
        return 0
    if variant == "f32":
        jax.config.update("jax_default_matmul_precision", "highest")
    backend = jax.extend.backend.get_backend()  # started before the baseline: the runtime is not the step's
    rng = np.random.default_rng(int(request["seed"]))
    tokens = rng.integers(0, c["vocab_size"], (c["batch"], c["seq"] + 1), dtype=np.int32)
    inputs, labels = jnp.asarray(tokens[:, :-1]), jnp.asarray(tokens[:, 1:])

    mesh = None
    if layout:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec
        mesh = Mesh(np.array(jax.devices()[:int(layout["dp_shard"]) * int(layout["tp"])]).reshape(
            int(layout["dp_shard"]), int(layout["tp"])), ("s", "t"))
        rows = NamedSharding(mesh, PartitionSpec("s", None))
        inputs, labels = jax.device_put(inputs, rows), jax.device_put(labels, rows)

    rss_baseline = status_bytes("VmRSS")
    params = init_params(jax, jnp, c, int(request["seed"]))
    if mesh is not None:
        params = jax.device_put(params, shard_params(jax, params, mesh))
    opt = {"m": jax.tree_util.tree_map(jnp.zeros_like, params), "v": jax.tree_util.tree_map(jnp.zeros_like, params),
           "count": jnp.zeros((), jnp.int32)}
    jax.block_until_ready((params, opt))
    # On an accelerator each block is recomputed in the backward (jax.checkpoint on the scan body),
    # as titan's scan recomputes it: without, the XL step's temporaries asked an H200 for 130 GiB.
    # On a GPU in bf16, attention is cuDNN's flash attention, as a JAX user on a GPU asks for it; where
    # cuDNN cannot run it (CUDA 13's cuDNN has failed with "no execution plans", jax issue 32430),
    # XLA's, and the reply says why.
    attention = "cudnn" if device == "cuda" and variant == "bf16" else None
    attention_note = attention or "xla"
    make = lambda attention: make_step(jax, jnp, c, variant == "bf16", remat=device != "cpu", mesh=mesh,
                                       sequence_parallel=bool(layout and layout.get("sequence_parallel", False)),
                                       attention=attention)
    step = make(attention)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)

    losses, seconds = [], []
    compile_seconds = 0.0
    for i in range(request["warmup"] + request["steps"]):
        if i == request["warmup"]:
            reset_peak_rss()
        start = time.perf_counter()
        if i == 0:
            # Ahead of time, so that the compilation is known apart; the first step includes it.
            try:
                step = step.lower(params, opt, inputs, labels).compile()
            except Exception as e:  # noqa: BLE001 - any failure of cuDNN's lowering or compile
                if attention is None:
                    raise
                attention_note = f"xla (cudnn failed: {str(e).splitlines()[0][:300]})"
                print(f"jax {variant}: cuDNN attention failed, XLA's instead: {e}", file=sys.stderr, flush=True)
                start = time.perf_counter()
                step = make(None).lower(params, opt, inputs, labels).compile()
            compile_seconds = time.perf_counter() - start
            optimized_hlo = step.as_text() if mesh is not None else ""
        params, opt, loss, _ = step(params, opt, inputs, labels)
        losses.append(float(loss))
        seconds.append(time.perf_counter() - start)
        print(f"jax {variant}  step {i + 1}: {seconds[-1] * 1e3:.0f} ms, loss {losses[-1]:.4f}", file=sys.stderr,
              flush=True)
    rss_peak = status_bytes("VmHWM")
    stats = jax.devices()[0].memory_stats() or {}
    on_device = {"device_peak_bytes": stats["peak_bytes_in_use"]} if "peak_bytes_in_use" in stats else {}
    if request.get("hlo_path"):
        with open(request["hlo_path"], "w") as f:
            f.write(optimized_hlo)
    print(json.dumps({**on_device, "jax_version": jax.__version__,
                      "xla": {"jaxlib": jaxlib.__version__, "platform": backend.platform,
                              "platform_version": backend.platform_version},
                      "threads": len(os.sched_getaffinity(0)), "variant": variant, "attention": attention_note,
                      "step_seconds": seconds[request["warmup"]:], "first_step_seconds": seconds[0],
                      "compile_seconds": compile_seconds, "losses": losses, "rss_baseline": rss_baseline,
                      "rss_peak": rss_peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
