#!/usr/bin/env python3
"""Fails when a file under src/titan/ includes a layer its own layer may not use.

The table below is docs/architecture.md's "Layers, bottom up" as the build enforces it (ctest
runs this script: test `layers`). A layer may use the layers its row lists and, transitively,
whatever those may use: ops may use kernels, so nn, which may use ops, may include a kernel header
too. With that closure a direct-include check is enough for the layer rule: any header a file reaches
through a chain was itself checked against a layer this one may use.

The model rule is stricter and follows chains: the model's math (every file under models/ but the
wiring that applies parallel plans or registers a family, MODEL_WIRING) must not reach dist/ or
parallel/, not even through a header of its own layer.

    scripts/check_layers.py [--root DIR]   # DIR holds src/titan (default: this repository)
Exit status: 0 clean, 1 violations (one message each), 2 the tree could not be read.
"""
import argparse
import fnmatch
import re
import sys
from pathlib import Path

# Bottom up, as docs/architecture.md lists them.
MAY_USE = {
    "core": [],
    "kernels": ["core"],
    # Gradient accumulation calls the elementwise kernels directly (autograd/node.cpp, engine.cpp).
    # Tensors on a PJRT device (graph mode) accumulate gradients as values of the captured program.
    "autograd": ["core", "kernels", "graph"],
    # Each op's lowering to StableHLO sits beside its kernel call.
    "ops": ["core", "kernels", "autograd", "graph"],
    "nn": ["ops"],
    "attention": ["ops"],
    "dist": ["core"],
    # Context parallelism's ring attention runs attention's tile kernels between sends and receives.
    "parallel": ["nn", "attention", "dist", "ops"],
    "models": ["nn", "attention", "parallel"],
    "data": ["core"],
    "optim": ["ops", "dist"],
    "checkpoint": ["core", "dist"],
    "graph": ["core"],
    "train": ["core", "kernels", "autograd", "ops", "nn", "attention", "dist", "parallel", "models",
              "data", "optim", "checkpoint", "graph"],
    "rl": ["models", "train"],
    "apps": ["train", "rl"],
}

# Files under models/ that may know a process group: they apply parallel/'s plans or hold the
# TrainSpec whose parallelize() returns parallel/'s FSDP state.
MODEL_WIRING = ["parallelize.*", "train_spec.*", "registry.*", "builtin.cpp", "state_dict_adapter.*"]
MODEL_FORBIDDEN = {"dist", "parallel"}

INCLUDE = re.compile(r'^\s*#\s*include\s*"(titan/([^/"]+)/[^"]*)"')


def closure(may_use):
    allowed = {}

    def visit(layer):
        if layer not in allowed:
            allowed[layer] = set()
            for used in may_use[layer]:
                allowed[layer] |= {used} | visit(used)
        return allowed[layer]

    for layer in may_use:
        visit(layer)
    return allowed


def includes(path):
    """(line number, "titan/<layer>/...", layer) of each titan include in `path`."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        match = INCLUDE.match(line)
        if match:
            found.append((number, match.group(1), match.group(2)))
    return found


def is_model_math(relative):
    parts = relative.parts
    return parts[0] == "models" and not any(fnmatch.fnmatch(parts[-1], p) for p in MODEL_WIRING)


def forbidden_chain(start, src, chains):
    """The include chain from `start` (a path under src/) to a dist/ or parallel/ header, or None."""
    if start in chains:
        return chains[start]
    chains[start] = None  # a cycle through `start` finds nothing new
    file = src / start
    if file.is_file():
        for _, target, layer in includes(file):
            if layer in MODEL_FORBIDDEN:
                chains[start] = [target]
                break
            rest = forbidden_chain(target, src, chains)
            if rest:
                chains[start] = [target] + rest
                break
    return chains[start]


def check(root):
    src = root / "src"
    titan = src / "titan"
    if not titan.is_dir():
        print(f"check_layers: {titan} is not a folder; pass --root the folder that holds src/titan",
              file=sys.stderr)
        return 2
    allowed = closure(MAY_USE)
    problems = []
    chains = {}
    for file in sorted(p for p in titan.rglob("*") if p.suffix in (".h", ".cpp")):
        relative = file.relative_to(titan)
        layer = relative.parts[0]
        where = file.relative_to(root)
        if layer not in MAY_USE:
            problems.append(f"{where}: folder src/titan/{layer}/ is not a layer of the table; add it to "
                            f"MAY_USE in scripts/check_layers.py (and docs/architecture.md's layer table) "
                            f"or move the file into a layer's folder")
            continue
        may = sorted(allowed[layer]) or ["std only"]
        for number, target, used in includes(file):
            if used != layer and used not in allowed[layer]:
                problems.append(f"{where}:{number}: includes \"{target}\": layer {layer}/ may use "
                                f"{', '.join(may)}, not {used}/. Move what it needs down into a layer "
                                f"{layer}/ may use, or move this code up; if the design is wrong, change "
                                f"docs/architecture.md's table and MAY_USE in scripts/check_layers.py "
                                f"together")
        if is_model_math(relative):
            chain = forbidden_chain(str(file.relative_to(src)), src, chains)
            if chain:
                problems.append(f"{where}: model code reaches {chain[-1].split('/')[1]}/ through "
                                f"{' -> '.join(chain)}: nothing in models/ but its wiring "
                                f"({', '.join(MODEL_WIRING)}) may know a process group. Move the "
                                f"declarations it needs out of the header that includes parallel/ or "
                                f"dist/ into one that does not")
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_layers: {len(problems)} violation(s) of the layer table (docs/architecture.md, "
              f"\"Layers, bottom up\")")
        return 1
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the folder holding src/titan (default: this repository)")
    return check(parser.parse_args().root)


if __name__ == "__main__":
    sys.exit(main())
