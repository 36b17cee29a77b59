#!/usr/bin/env python3
"""Writes PyTorch reference data for titan's parity tests.

Every tests/parity/cases_*.py defines CASES: a dict mapping a case name to a function that takes
a torch.Generator and returns (tensors, metadata). `tensors` maps names to torch tensors: by
convention `in.*` are inputs, `out.*` forward outputs, `grad.*` gradients of the inputs under the
cotangent `cot.*`. `metadata` holds scalar attributes (as strings). Each case becomes
<out>/<case>.safetensors, which the C++ tests read.
"""
import argparse
import glob
import importlib.util
import json
import os
import struct
import sys
import zlib

import torch

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16",
          torch.int32: "I32", torch.int64: "I64"}


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    here = os.path.dirname(os.path.abspath(__file__))
    count = 0
    for path in sorted(glob.glob(os.path.join(here, "cases_*.py"))):
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for name, fn in mod.CASES.items():
            # crc32, not hash(): Python salts string hashes per process, and inputs must not change run to run.
            gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            tensors, metadata = fn(gen)
            write_safetensors(os.path.join(args.out, name + ".safetensors"), tensors, metadata)
            count += 1
    print(f"wrote {count} parity cases to {args.out}")
    return 0 if count else 1


if __name__ == "__main__":
    sys.exit(main())
