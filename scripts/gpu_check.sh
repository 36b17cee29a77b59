#!/usr/bin/env bash
# Runs graph mode's tests on an NVIDIA GPU through the CUDA 13 PJRT plugin:
#   scripts/gpu_check.sh
# Installs jax-cuda13-pjrt and jax-cuda13-plugin[with-cuda] (the plugin and the NVIDIA libraries
# it loads, about 3 GB) into .pjrt/cuda, builds (make build), runs the Pjrt* and Graph* unit
# tests with TITAN_GRAPH_PLUGIN=cuda, then the train-step benchmark on the GPU if it has
# --graph-plugin. UNTESTED: written on a machine without a GPU; the CUDA plugin was seen to load
# and initialize there (PJRT_Client_Create then reports "No visible GPU devices").
set -euo pipefail
cd "$(dirname "$0")/.."

command -v nvidia-smi >/dev/null && nvidia-smi -L ||
  { echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed)" >&2; exit 1; }
scripts/setup.sh

cuda=.pjrt/cuda
plugin=$cuda/jax_plugins/xla_cuda13/xla_cuda_plugin.so
if [[ ! -f $plugin ]]; then
  wheels=$(mktemp -d)
  trap 'rm -rf "$wheels"' EXIT
  echo "gpu_check: downloading the CUDA 13 PJRT plugin and its NVIDIA libraries"
  # With dependencies: the with-cuda extra is the NVIDIA wheels (cuBLAS, cuDNN, NCCL, ...).
  .venv/bin/python -m pip download -q --disable-pip-version-check -d "$wheels" \
    jax-cuda13-pjrt "jax-cuda13-plugin[with-cuda]"
  # Unpacked side by side as pip would install them, so that the plugin's RUNPATH
  # ($ORIGIN/../../nvidia/cu13/lib) finds the libraries.
  python3 - "$wheels" "$cuda" <<'PY'
import pathlib, sys, zipfile
wheels, target = map(pathlib.Path, sys.argv[1:])
for wheel in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if ".dist-info/" in info.filename or info.is_dir():
                continue
            out = target / info.filename
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(info))
            if out.suffix == ".so" or ".so." in out.name:
                out.chmod(0o755)
    print(f"gpu_check: unpacked {wheel.name}")
PY
fi
[[ -f $plugin ]] || { echo "gpu_check: $plugin missing after unpacking the wheels" >&2; exit 1; }
# For libraries the RUNPATH does not name (wheels that keep them under nvidia/<name>/lib).
LD_LIBRARY_PATH=$(find "$PWD/$cuda/nvidia" -type d -name lib | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

make build
export TITAN_GRAPH_PLUGIN=cuda
./build/tests/titan_unit_tests --gtest_filter='Pjrt*:Graph*'
# The source, not --help: the benchmark has no --help and would start its rounds.
if grep -q -- '--graph-plugin' bench/train_step.cpp; then
  ./build/bench/bench_train_step --graph-plugin=cuda
else
  echo "gpu_check: skipped bench_train_step on the GPU (it has no --graph-plugin option yet)"
fi
