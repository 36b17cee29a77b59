"""What bench/moe_jax.py and bench/attention_jax.py share: reading the request, bringing JAX up on
the CPU with the request's threads, and timing each case's jitted function the same way (compiled
ahead of time, one warm-up call, then `reps` timed calls). Prints the one JSON line the benchmarks
read: {"jax_version", "jaxlib", "threads", "results": {name: {"seconds": [...],
"compile_seconds"}}}, or {"error"}."""
import json
import os
import sys
import time


def use_threads(threads):
    """XLA's CPU client sizes its thread pool from the CPUs this process may run on, and has no
    flag for it: narrowing the affinity (before jax loads) is how it gets the others' count."""
    cpus = sorted(os.sched_getaffinity(0))
    if 0 < threads < len(cpus):
        os.sched_setaffinity(0, cpus[:threads])


def run(build):
    """build(jax, jnp, case) -> (function, arguments): the function is jitted, compiled on the
    arguments and timed on them."""
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
        fn, args = build(jax, jnp, c)
        start = time.perf_counter()
        step = jax.jit(fn).lower(*args).compile()
        compile_seconds = time.perf_counter() - start
        jax.block_until_ready(step(*args))
        seconds = []
        for _ in range(int(request["reps"])):
            start = time.perf_counter()
            jax.block_until_ready(step(*args))
            seconds.append(time.perf_counter() - start)
        print(f"jax {c['name']}: {sorted(seconds)[len(seconds) // 2] * 1e3:.1f} ms (compile {compile_seconds:.1f} s)",
              file=sys.stderr, flush=True)
        results[c["name"]] = {"seconds": seconds, "compile_seconds": compile_seconds}
    print(json.dumps({"jax_version": jax.__version__, "jaxlib": jaxlib.__version__,
                      "threads": len(os.sched_getaffinity(0)), "results": results}))
    return 0
