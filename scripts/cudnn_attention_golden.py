#!/usr/bin/env python3
"""Writes the cuDNN flash-attention custom calls as JAX lowers them for CUDA, forward and backward,
into tests/fixtures/cudnn_attention/<case>.txt, for test_cudnn_attention.cpp to hold titan's text
against. Needs no GPU: JAX lowers for the "cuda" platform on any machine once its cuDNN version and
compute-capability checks are answered (as a Hopper with cuDNN 9.10 would).

    python3 -m venv /tmp/jax && /tmp/jax/bin/pip install "jax[cpu]==0.10.2"
    /tmp/jax/bin/python scripts/cudnn_attention_golden.py
"""
import math
import pathlib
import re

import jax
import jax.numpy as jnp
from jax import export
from jax._src.cudnn import fused_attention_stablehlo as fa

fa.check_cudnn_version = lambda: 91000
fa.check_compute_capability = lambda capability: True
fa.is_cuda_compute_capability_equal = lambda capability: capability == "9.0"

# name: (B, T, query heads, kv heads, head dim, scale, mask type, sliding window, documents a row
# at most: packed documents' lengths and offsets, max_seg_per_batch, when above 1)
CASES = {
    "causal_gqa": (2, 128, 8, 2, 64, 0.125, fa.MaskType.CAUSAL, None, 1),
    "sliding_window": (1, 96, 4, 4, 32, 1 / math.sqrt(32), fa.MaskType.CAUSAL, 16, 1),
    "no_mask": (1, 96, 4, 4, 32, 0.3, fa.MaskType.NO_MASK, None, 1),
    # Query heads as many as kv heads: JAX scales the kv offsets by the query heads (a kv token's
    # stride only when they are equal).
    "documents": (2, 128, 4, 4, 64, 0.125, fa.MaskType.CAUSAL, None, 4),
}


def calls(B, T, N, K, H, scale, mask, window, documents):
    def f(q, k, v, dout, *segments):
        packed = dict(zip(["q_seqlen", "kv_seqlen", "q_offsets", "kv_offsets"], segments))
        attend = lambda q, k, v: fa.dot_product_attention(
            q, k, v, scale=scale, mask_type=mask, qkv_layout="BTNH", sliding_window_length=window, **packed)
        out, vjp = jax.vjp(attend, q, k, v)
        return out, vjp(dout)

    shapes = [(B, T, N, H), (B, T, K, H), (B, T, K, H), (B, T, N, H)]
    args = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in shapes]
    if documents > 1:
        M = documents
        args += [jax.ShapeDtypeStruct(s, jnp.int32) for s in [(B, M), (B, M), (B, M + 1), (B, M + 1)]]
    lowered = export.export(jax.jit(f), platforms=["cuda"],
                            disabled_checks=[export.DisabledSafetyCheck.custom_call("__cudnn$fmhaSoftmax"),
                                             export.DisabledSafetyCheck.custom_call("__cudnn$fmhaSoftmaxBackward")])
    module = lowered(*args).mlir_module()
    out = []
    for line in module.splitlines():
        if "@__cudnn$" not in line:
            continue
        # The call's target, then its attributes and types: what does not depend on the values'
        # names or the source locations.
        target = re.search(r"@(__cudnn\$\w+)", line).group(1)
        body = line[line.index(") {") + 2:]
        body = re.sub(r" (at )?loc\(.*$", "", body).strip()
        out.append(target + " " + body)
    return out


def main():
    folder = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "cudnn_attention"
    folder.mkdir(parents=True, exist_ok=True)
    for name, case in CASES.items():
        lines = calls(*case)
        assert len(lines) == 2, (name, lines)
        (folder / f"{name}.txt").write_text(f"# jax {jax.__version__}\n" + "\n".join(lines) + "\n")
        print(name, "written")


if __name__ == "__main__":
    main()
