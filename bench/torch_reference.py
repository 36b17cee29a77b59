#!/usr/bin/env python3
"""Times PyTorch eager on the CPU for titan's benchmarks (called by bench/support/torch_reference.cpp).

Argument: a JSON file {"threads": n, "cases": [case, ...]}. Each case has "name", "op", the op's
parameters (see BUILDERS), "mode" ("fwd", "bwd" or "step") and the timing plan the C++ side used
for titan: "warmup" seconds of calls (at least one), then "reps" repetitions of as many calls as
fill "min_time" seconds (at least one); the figure is the median repetition's time per call.

fwd runs under torch.no_grad(), as titan's forward benchmarks record no graph. bwd builds the graph
once, untimed, then times torch.autograd.grad(out, inputs, grad_out, retain_graph=True): backward
alone, the same method as titan's side, with no forward-minus-forward subtraction noise.

Prints one JSON line on stdout: {"torch", "threads", "blas", "results": {name: {"seconds"} or
{"error"}}}, or {"error"} when nothing could run. Progress goes to stderr.
"""
import gc
import json
import math
import os
import statistics
import sys
import time


def rms_norm(case, torch):
    x = torch.randn(case["rows"], case["dim"], requires_grad=True)
    w = torch.randn(case["dim"], requires_grad=True)
    eps = case["eps"]
    # torch 1.13 has no fused RMSNorm: this formula is what models run in eager mode.
    return lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w, [x, w]


def swiglu(case, torch):
    g = torch.randn(case["rows"], case["dim"], requires_grad=True)
    u = torch.randn(case["rows"], case["dim"], requires_grad=True)
    return lambda: torch.nn.functional.silu(g) * u, [g, u]


def rope(case, torch):
    b, t, h, d = case["batch"], case["seq"], case["heads"], case["head_dim"]
    x = torch.randn(b, t, h, d, requires_grad=True)
    inv_freq = 1.0 / (case["theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    cos = angles.cos().float()[None, :, None, :]
    sin = angles.sin().float()[None, :, None, :]

    def rotate_half(v):
        return torch.cat((-v[..., d // 2:], v[..., : d // 2]), dim=-1)

    return lambda: x * cos + rotate_half(x) * sin, [x]


def softmax(case, torch):
    x = torch.randn(case["rows"], case["cols"], requires_grad=True)
    return lambda: torch.softmax(x, dim=-1), [x]


def cross_entropy(case, torch):
    logits = torch.randn(case["rows"], case["vocab"], requires_grad=True)
    targets = torch.randint(0, case["vocab"], (case["rows"],))
    return lambda: torch.nn.functional.cross_entropy(logits, targets), [logits]


def matmul(case, torch):
    m, n, k, batch = case["m"], case["n"], case["k"], case["batch"]
    lead = (batch,) if batch > 1 else ()
    # Transposed operands are views of the other layout, so BLAS gets a transpose flag, not a copy.
    a = torch.randn(*lead, k, m).transpose(-1, -2) if case["trans_a"] else torch.randn(*lead, m, k)
    b = torch.randn(*lead, n, k).transpose(-1, -2) if case["trans_b"] else torch.randn(*lead, k, n)
    return lambda: torch.matmul(a, b), None


def adamw(case, torch):
    p = torch.nn.Parameter(torch.randn(case["numel"]))
    p.grad = torch.randn(case["numel"])
    opt = torch.optim.AdamW([p], lr=case["lr"], betas=(case["beta1"], case["beta2"]), eps=case["eps"],
                            weight_decay=case["weight_decay"], foreach=case["foreach"])
    return opt.step, None


def moe(case, torch):
    """A mixture-of-experts layer, forward + backward, as Hugging Face's Qwen3MoeSparseMoeBlock runs
    it in eager mode: softmax router, top-k (renormalised), then per expert that got tokens, its
    tokens gathered, its SwiGLU applied and the result index_add_-ed back, weighted."""
    t, d, e, k, h = case["tokens"], case["dim"], case["experts"], case["top_k"], case["hidden"]
    F = torch.nn.functional
    x = torch.randn(t, d, requires_grad=True)
    gate = (torch.randn(e, d) * d ** -0.5).requires_grad_()
    w1, w3 = ((torch.randn(e, h, d) * d ** -0.5).requires_grad_() for _ in range(2))
    w2 = (torch.randn(e, d, h) * h ** -0.5).requires_grad_()
    dout = torch.randn(t, d)

    def call():
        probs = torch.softmax(x @ gate.t(), dim=-1)
        weights, ids = torch.topk(probs, k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        mask = F.one_hot(ids, e).permute(2, 1, 0)  # [experts, k, tokens]
        for i in torch.nonzero(mask.sum(dim=(-1, -2)) > 0).flatten().tolist():
            choice, token = torch.where(mask[i])
            xi = x[token]
            yi = (F.silu(xi @ w1[i].t()) * (xi @ w3[i].t())) @ w2[i].t()
            out.index_add_(0, token, yi * weights[token, choice, None])
        return torch.autograd.grad(out, (x, gate, w1, w2, w3), dout)

    return call, None


BUILDERS = {"rms_norm": rms_norm, "swiglu": swiglu, "rope": rope, "softmax": softmax,
            "cross_entropy": cross_entropy, "matmul": matmul, "adamw": adamw, "moe": moe}


def callable_for(case, torch):
    fn, inputs = BUILDERS[case["op"]](case, torch)
    mode = case["mode"]
    if mode == "step":
        return fn
    if mode == "fwd":
        def forward():
            with torch.no_grad():
                return fn()
        return forward
    if mode == "bwd":
        out = fn()
        grad_out = torch.ones_like(out) if out.dim() == 0 else torch.randn_like(out)
        return lambda: torch.autograd.grad(out, inputs, grad_out, retain_graph=True)
    raise ValueError(f"unknown mode {mode!r}")


def median_seconds(fn, case):
    deadline = time.perf_counter() + case["warmup"]
    while True:
        start = time.perf_counter()
        fn()
        once = time.perf_counter() - start
        if start + once >= deadline:
            break
    # The last warm-up call, warm by then, sizes the repetitions.
    iters = max(1, math.ceil(case["min_time"] / max(once, 1e-9)))
    samples = []
    for _ in range(case["reps"]):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - start) / iters)
    return statistics.median(samples)


def loaded_blas():
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "blas" in line and "lapack" not in line}
    return ", ".join(sorted(p for p in paths if p.startswith("/"))) or "unknown"


def status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss():
    # "5" resets VmHWM to the current resident set (Linux >= 4.0).
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def start_torch():
    """Reads the request (the JSON file named by argv[1]) and imports torch with its thread count.

    Returns (request, torch), or (request, None) after printing {"error"} when torch cannot load.
    Shared by every bench/*_torch.py script, so all of them start torch the same way.
    """
    with open(sys.argv[1]) as f:
        request = json.load(f)
    threads = int(request["threads"])
    # Before torch loads OpenMP and OpenBLAS, so their pools start at this size too.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"error": f"cannot import torch with {sys.executable}: {e}"}))
        return request, None
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return request, torch


def environment(torch):
    """What the reply reports of the run: torch's version, threads, BLAS and malloc tunables."""
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "blas": loaded_blas(),
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")}


def main():
    request, torch = start_torch()
    if torch is None:
        return 0
    results = {}
    for case in request["cases"]:
        name = case["name"]
        try:
            seconds = median_seconds(callable_for(case, torch), case)
            results[name] = {"seconds": seconds}
            print(f"torch  {name:<48} {seconds * 1e3:10.3f} ms", file=sys.stderr, flush=True)
        except (RuntimeError, MemoryError, ValueError, KeyError) as e:
            results[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"torch  {name}: {results[name]['error']}", file=sys.stderr, flush=True)
        gc.collect()  # the next case may need this one's memory
    print(json.dumps({**environment(torch), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
