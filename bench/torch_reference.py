#!/usr/bin/env python3
"""Times PyTorch on the CPU for titan's benchmarks (called by bench/support/torch_reference.cpp).

Argument: a JSON file {"threads": n, "cases": [case, ...]}. Each case has "name", "op", the op's
parameters (see BUILDERS), "mode" ("fwd", "bwd", "fwd_bwd" or "step"), "variants" (see VARIANTS) and the
timing plan the C++ side used for titan: "warmup" seconds of calls (at least one), then "reps"
repetitions of as many calls as fill "min_time" seconds (at least one); the figure is the median
repetition's time per call.

fwd runs under torch.no_grad(), as titan's forward benchmarks record no graph. bwd builds the graph
once, untimed, then times torch.autograd.grad(out, inputs, grad_out, retain_graph=True): backward
alone, the same method as titan's side, with no forward-minus-forward subtraction noise. fwd_bwd
times the forward and then torch.autograd.grad, each call. Under torch.compile the graph's forward
and backward are both inductor's; autograd.grad itself stays outside the compiled function.

Prints one JSON line on stdout: {environment(), "results": {name: {variant: {"seconds",
"first_call_seconds", "impl"} or {"error"}}}}, or {"error"} when nothing could run. Progress goes
to stderr.
"""
import gc
import json
import math
import os
import re
import statistics
import sys
import time
from typing import Callable, NamedTuple, Optional

# What a PyTorch 2 user runs: eager, torch.compile (default inductor backend), each in float32 and
# under bf16 autocast. titan is compared with the best float32 figure; bf16 is information.
VARIANTS = ("eager", "compile", "eager bf16", "compile bf16")


class Built(NamedTuple):
    fn: Callable
    inputs: Optional[list] = None  # what bwd differentiates
    impl: str = ""  # which implementation torch picked, when it has several
    dynamic: Optional[bool] = False  # torch.compile's; None: automatic, for shapes that vary by call


def rms_norm(case, torch):
    x = torch.randn(case["rows"], case["dim"], requires_grad=True)
    w = torch.randn(case["dim"], requires_grad=True)
    return Built(lambda: torch.nn.functional.rms_norm(x, (case["dim"],), w, case["eps"]), [x, w])


def swiglu(case, torch):
    g = torch.randn(case["rows"], case["dim"], requires_grad=True)
    u = torch.randn(case["rows"], case["dim"], requires_grad=True)
    return Built(lambda: torch.nn.functional.silu(g) * u, [g, u])


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

    # PyTorch has no RoPE op: this is the formula models (Hugging Face's Llama) write.
    return Built(lambda: x * cos + rotate_half(x) * sin, [x])


def softmax(case, torch):
    x = torch.randn(case["rows"], case["cols"], requires_grad=True)
    return Built(lambda: torch.softmax(x, dim=-1), [x])


def cross_entropy(case, torch):
    logits = torch.randn(case["rows"], case["vocab"], requires_grad=True)
    targets = torch.randint(0, case["vocab"], (case["rows"],))
    return Built(lambda: torch.nn.functional.cross_entropy(logits, targets), [logits])


def matmul(case, torch):
    m, n, k, batch = case["m"], case["n"], case["k"], case["batch"]
    lead = (batch,) if batch > 1 else ()
    # Transposed operands are views of the other layout, so BLAS gets a transpose flag, not a copy.
    # "dtype": "bf16" makes both operands bf16 (torch then returns a bf16 product).
    dtype = torch.bfloat16 if case.get("dtype") == "bf16" else torch.float32
    a = (torch.randn(*lead, k, m, dtype=dtype).transpose(-1, -2) if case["trans_a"]
         else torch.randn(*lead, m, k, dtype=dtype))
    b = (torch.randn(*lead, n, k, dtype=dtype).transpose(-1, -2) if case["trans_b"]
         else torch.randn(*lead, k, n, dtype=dtype))
    return Built(lambda: torch.matmul(a, b))


def adamw(case, torch):
    p = torch.nn.Parameter(torch.randn(case["numel"]))
    p.grad = torch.randn(case["numel"])
    opt, impl = make_adamw(torch, [p], compiled=case["variant"].startswith("compile"), lr=case["lr"],
                           betas=(case["beta1"], case["beta2"]), eps=case["eps"],
                           weight_decay=case["weight_decay"])
    return Built(opt.step, impl=impl)


def make_adamw(torch, params, compiled, **hyper):
    """AdamW as a PyTorch 2 user builds it: fused where this build runs it on the CPU, else foreach.
    Under torch.compile the default (foreach) optimizer, whose step inductor fuses (PyTorch's
    compiled-optimizer recipe). Returns (optimizer, which one)."""
    params = list(params)
    if compiled:
        return torch.optim.AdamW(params, **hyper), "torch.compile(AdamW.step)"
    try:
        # Refused at construction where this build has no fused kernel for the parameters' device.
        return torch.optim.AdamW(params, fused=True, **hyper), "AdamW(fused=True)"
    except (RuntimeError, ValueError) as e:
        return torch.optim.AdamW(params, foreach=True, **hyper), f"AdamW(foreach=True): fused refused ({e})"


def moe(case, torch):
    """Hugging Face's Qwen3MoeSparseMoeBlock (transformers 5): softmax router, top-k
    (renormalised), then the experts as the variant names them: "grouped_mm" in it, HF's
    grouped_mm implementation (tokens sorted by expert, one torch._grouped_mm per projection);
    otherwise HF's eager one (per expert that got tokens, its tokens gathered, its SwiGLU applied,
    the result index_add_-ed back)."""
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    d, h = case["dim"], case["hidden"]
    config = Qwen3MoeConfig(hidden_size=d, moe_intermediate_size=h, num_experts=case["experts"],
                            num_experts_per_tok=case["top_k"], norm_topk_prob=True)
    impl = "grouped_mm" if "grouped_mm" in case["variant"] else "eager"
    config._experts_implementation = impl
    block = Qwen3MoeSparseMoeBlock(config)
    with torch.no_grad():
        block.gate.weight.normal_(0, d ** -0.5)
        block.experts.gate_up_proj.normal_(0, d ** -0.5)
        block.experts.down_proj.normal_(0, h ** -0.5)
    x = torch.randn(1, case["tokens"], d, requires_grad=True)
    # Each expert's row count differs, call to call: with shapes specialised, every count would
    # recompile, and past the recompile limit run eager without a word.
    return Built(lambda: block(x), [x, *block.parameters()], dynamic=None)


def conv2d(case, torch):
    """F.conv2d on [batch, channels, height, width] with a square kernel, as the autoencoder's."""
    c, o, k = case["channels"], case["out_channels"], case["kernel"]
    x = torch.randn(case["batch"], c, case["height"], case["width"], requires_grad=True)
    w = (torch.randn(o, c, k, k) * (c * k * k) ** -0.5).requires_grad_()
    b = torch.randn(o, requires_grad=True)
    impl = "mkldnn (oneDNN)" if torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled else "native"
    return Built(lambda: torch.nn.functional.conv2d(x, w, b, stride=case["stride"], padding=case["padding"]),
                 [x, w, b], impl=impl)


def group_norm(case, torch):
    c = case["channels"]
    x = torch.randn(case["batch"], c, case["height"], case["width"], requires_grad=True)
    w = torch.randn(c, requires_grad=True)
    b = torch.randn(c, requires_grad=True)
    return Built(lambda: torch.nn.functional.group_norm(x, case["groups"], w, b, case["eps"]), [x, w, b])


def flux_autoencoder(case, torch):
    """FLUX's autoencoder encoding images: diffusers' AutoencoderKL from case["folder"],
    encode(x).latent_dist's mean and log-variance, x [batch, 3, size, size] in [-1, 1]."""
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(case["folder"]).eval()
    x = torch.rand(case["batch"], 3, case["size"], case["size"]) * 2 - 1

    def encode():
        d = vae.encode(x).latent_dist
        return d.mean, d.logvar
    return Built(encode)


def text_encoder(case, torch):
    """A transformers text encoder from case["folder"] on random ids [batch, seq]: T5EncoderModel's
    last_hidden_state ("t5"), CLIPTextModel's pooler_output ("clip"), as FLUX's pipeline reads them."""
    import transformers

    model_class, output = {"t5": (transformers.T5EncoderModel, "last_hidden_state"),
                           "clip": (transformers.CLIPTextModel, "pooler_output")}[case["model"]]
    model = model_class.from_pretrained(case["folder"]).eval()
    ids = torch.randint(0, model.config.vocab_size, (case["batch"], case["seq"]))
    return Built(lambda: getattr(model(input_ids=ids), output),
                 impl=f"attn_implementation {model.config._attn_implementation}")


BUILDERS = {"rms_norm": rms_norm, "swiglu": swiglu, "rope": rope, "softmax": softmax,
            "cross_entropy": cross_entropy, "matmul": matmul, "adamw": adamw, "moe": moe,
            "conv2d": conv2d, "group_norm": group_norm, "flux_autoencoder": flux_autoencoder,
            "text_encoder": text_encoder}


def variant_fn(fn, variant, torch, dynamic=False):
    """fn as `variant` runs it: through torch.compile (default inductor backend; dynamic=False
    specialises on the shapes, as each case compiles its own) when it starts with "compile", and
    under CPU bf16 autocast when it ends with "bf16". Anything between names the builder's
    implementation (e.g. "grouped_mm")."""
    if variant.startswith("compile"):
        fn = torch.compile(fn, dynamic=dynamic)
    if variant.endswith("bf16"):
        inner = fn

        def fn(*args):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return inner(*args)
    return fn


def callable_for(case, torch):
    """(the timed callable, the implementation note); for bwd the graph is built here, once."""
    built = BUILDERS[case["op"]](case, torch)
    fn = variant_fn(built.fn, case["variant"], torch, built.dynamic)
    mode = case["mode"]
    if mode == "step":
        return fn, built.impl
    if mode == "fwd":
        def forward():
            with torch.no_grad():
                return fn()
        return forward, built.impl
    if mode == "fwd_bwd":
        grad_out = []

        def forward_backward():
            out = fn()
            if not grad_out:
                grad_out.append(torch.randn_like(out))
            return torch.autograd.grad(out, built.inputs, grad_out[0])
        return forward_backward, built.impl
    if mode == "bwd":
        out = fn()
        grad_out = torch.ones_like(out) if out.dim() == 0 else torch.randn_like(out)
        return lambda: torch.autograd.grad(out, built.inputs, grad_out, retain_graph=True), built.impl
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


def measure(make, case):
    """Times the callable make() returns (make: fn, or (fn, impl)). first_call_seconds is make()
    plus the first call: under torch.compile, the compilation (forward and backward), which the
    median leaves out."""
    start = time.perf_counter()
    made = make()
    fn, impl = made if isinstance(made, tuple) else (made, "")
    fn()
    first = time.perf_counter() - start
    result = {"seconds": median_seconds(fn, case), "first_call_seconds": first}
    if impl:
        result["impl"] = impl
    return result


def run_variants(case, make, torch, log_width=48):
    """{variant: measure(...) or {"error"}} for each of case["variants"]; make(case) builds one
    variant's callable, the variant being in case["variant"]."""
    out = {}
    for variant in case.get("variants", ["eager"]):
        label = f"{case['name']} [{variant}]"
        try:
            out[variant] = measure(lambda: make({**case, "variant": variant}), case)
            r = out[variant]
            compiled = f" (first call {r['first_call_seconds']:.1f} s)" if variant.startswith("compile") else ""
            print(f"torch  {label:<{log_width}} {r['seconds'] * 1e3:10.3f} ms{compiled}", file=sys.stderr,
                  flush=True)
        except Exception as e:  # noqa: BLE001 -- inductor raises its own types; the case is reported, not the run
            out[variant] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            print(f"torch  {label}: {out[variant]['error']}", file=sys.stderr, flush=True)
        if variant.startswith("compile"):
            torch._dynamo.reset()  # the next case compiles afresh rather than piling up guards
        gc.collect()  # the next one may need this one's memory
    return out


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
    # Before torch loads OpenMP and MKL, so their pools start at this size too.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # Inductor compiles its C++ in a pool of worker processes by default; on a few cores their
    # start-up costs more than they save. A setting from the caller is kept.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"error": f"cannot import torch with {sys.executable}: {e}"}))
        return request, None
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return request, torch


def environment(torch):
    """What the reply reports of the run: torch's version, threads, kernels and malloc tunables."""
    config = torch.__config__.show()

    def found(pattern):
        m = re.search(pattern, config)
        return m.group(1) if m else "?"

    blas, mkl = found(r"BLAS_INFO=(\w+)"), found(r"Math Kernel Library Version (\S+)")
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "blas": f"{blas} (MKL {mkl})",
            "onednn": found(r"MKL-DNN (v[\w.]+)") if torch.backends.mkldnn.is_available() else "unavailable",
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "compile_threads": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", ""),
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")}


def diffusers_main(cases_key, run_variant):
    """The main of a bench script that times diffusers: each of request[cases_key] under every
    request["variants"] by run_variant(case, variant, request, torch), an error reported per case,
    torch.compile's caches dropped after each compiled variant; prints the reply line."""
    request, torch = start_torch()
    if torch is None:
        return 0
    try:
        import diffusers
    except ImportError as e:
        print(json.dumps({"error": f"cannot import diffusers with {sys.executable}: {e}"}))
        return 0
    results = {}
    for case in request[cases_key]:
        results[case["name"]] = {}
        for variant in request["variants"]:
            try:
                results[case["name"]][variant] = run_variant(case, variant, request, torch)
            except Exception as e:  # noqa: BLE001 -- inductor raises its own types; the case is reported
                results[case["name"]][variant] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
                print(f"torch  {case['name']} [{variant}]: {results[case['name']][variant]['error']}",
                      file=sys.stderr)
            if variant.startswith("compile"):
                torch._dynamo.reset()
            gc.collect()
    print(json.dumps({**environment(torch), "results": results, "diffusers": diffusers.__version__}))
    return 0


def main():
    request, torch = start_torch()
    if torch is None:
        return 0
    results = {case["name"]: run_variants(case, lambda c: callable_for(c, torch), torch)
               for case in request["cases"]}
    print(json.dumps({**environment(torch), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
