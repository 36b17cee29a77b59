#!/usr/bin/env bash
# Graph mode on an NVIDIA GPU through the CUDA 13 PJRT plugin: the Pjrt*, Graph* and
# CudnnAttention* tests with TITAN_GRAPH_PLUGIN=cuda (graph runs on the GPU, eager ones on the
# host, compared), then bench_train_step --device=cuda (titan graph against JAX and PyTorch 2 on the
# same GPU), then A/B runs: the step with XLA's attention instead of cuDNN's, and XLA's GPU options:
#   scripts/gpu_check.sh [bench_train_step flags; default: XL in bf16 against torch eager and
#                         compile bf16 and JAX bf16 (cuDNN attention), one round]
# With the defaults it is meant to fit one 10-minute device call (planned at about 9 minutes: tests
# 150 s at most, the XL benchmark's four sides, six short A/B runs; not yet timed on a GPU). The 3B
# shape in a second call:
#   TITAN_GPU_TESTS=none TITAN_GPU_XLA_AB=none scripts/gpu_check.sh '--benchmark_filter=train_step/3B$' \
#     --precision=bf16 '--torch=eager bf16,compile bf16' --jax=bf16 --rounds=1
# Environment:
#   TITAN_GPU_PYTHON  the Python whose torch (CUDA build) and jax run the references (default python3)
#   TITAN_GPU_BUNDLE  a tarball from scripts/gpu_bundle.sh: run its binaries instead of building
#                     (a machine with no network or build dependencies)
#   TITAN_GPU_TESTS   gtest filter (default: the graph, PJRT and cuDNN-attention tests that need no
#                     CPU plugin file); "none" skips the tests
#   TITAN_GRAPH_PLUGIN_OPTIONS  the tests' client options (default preallocate=false)
#   TITAN_GPU_TEST_TIMEOUT, TITAN_GPU_BENCH_TIMEOUT  seconds for the tests and for each benchmark
#                     run (default 150, 240)
#   TITAN_GPU_XLA_AB  XLA option sets (compile.xla_options) to A/B after the benchmark, separated by
#                     ';', each a short run of TITAN_GPU_XLA_AB_ARGS, after one with XLA's attention
#                     (compile.cudnn_attention = false); "none" skips them all. Default: XLA's
#                     defaults, command buffers off, the latency-hiding scheduler on, Triton's GEMMs off
#   TITAN_GPU_XLA_AB_ARGS  bench_train_step flags of each A/B run (default: config XL, titan graph
#                     bf16 alone, 1 round of 5 steps)
# The CUDA plugin: .pjrt/cuda when present; else the one in TITAN_GPU_PYTHON's jax-cuda13-pjrt
# (linked there, with its NVIDIA libraries); else the wheels jax-cuda13-pjrt and
# jax-cuda13-plugin[with-cuda] are downloaded and unpacked into .pjrt/cuda (about 3 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

command -v nvidia-smi >/dev/null && nvidia-smi -L ||
  { echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed)" >&2; exit 1; }
# A path: the benchmark runs it as given, not through PATH.
py=$(command -v "${TITAN_GPU_PYTHON:-python3}") || { echo "gpu_check: no ${TITAN_GPU_PYTHON:-python3} on PATH" >&2; exit 1; }

if [[ -n ${TITAN_GPU_BUNDLE:-} ]]; then
  bundle=$(mktemp -d)
  xz -dc "$TITAN_GPU_BUNDLE" | tar -C "$bundle" -xf -
  # The binaries name their source tree (configs, data, the benchmark's scripts) and their build
  # folder (the tests' fake plugins) by the paths they were built at: make those lead here.
  source_dir=$(cat "$bundle/source_dir")
  if [[ $source_dir != "$repo" ]]; then
    [[ ! -e $source_dir || $(readlink -f "$source_dir") == "$repo" ]] ||
      { echo "gpu_check: the bundle was built at $source_dir, which exists here and is not $repo" >&2; exit 1; }
    mkdir -p "$(dirname "$source_dir")"
    ln -sfn "$repo" "$source_dir"
  fi
  build_dir=$(cat "$bundle/build_dir")
  mkdir -p "$build_dir/tests"
  cp "$bundle"/bin/libfake_pjrt_plugin_*.so "$build_dir/tests/"
  tests=$bundle/bin/titan_unit_tests bench=$bundle/bin/bench_train_step
  export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  scripts/setup.sh
  make build
  tests=build/tests/titan_unit_tests bench=build/bench/bench_train_step
fi

export TITAN_PJRT_DIR=${TITAN_PJRT_DIR:-$repo/.pjrt}
cuda=$TITAN_PJRT_DIR/cuda
plugin=$cuda/jax_plugins/xla_cuda13/xla_cuda_plugin.so
site=$("$py" -c 'import importlib.util as u, os
s = u.find_spec("jax_plugins.xla_cuda13")
print(os.path.dirname(os.path.dirname(os.path.dirname(s.origin))) if s and s.origin else "")' 2>/dev/null || true)
if [[ ! -f $plugin && -n $site && -f $site/jax_plugins/xla_cuda13/xla_cuda_plugin.so ]]; then
  echo "gpu_check: the CUDA plugin of $py's jax-cuda13-pjrt ($site)"
  mkdir -p "$cuda"
  ln -sfn "$site/jax_plugins" "$cuda/jax_plugins"
  [[ -d $site/nvidia ]] && ln -sfn "$site/nvidia" "$cuda/nvidia"
elif [[ ! -f $plugin ]]; then
  wheels=$(mktemp -d)
  echo "gpu_check: downloading the CUDA 13 PJRT plugin and its NVIDIA libraries"
  # With dependencies: the with-cuda extra is the NVIDIA wheels (cuBLAS, cuDNN, NCCL, ...).
  "$py" -m pip download -q --disable-pip-version-check -d "$wheels" jax-cuda13-pjrt "jax-cuda13-plugin[with-cuda]"
  # Unpacked side by side as pip would install them, so that the plugin's RUNPATH
  # ($ORIGIN/../../nvidia/cu13/lib) finds the libraries.
  "$py" - "$wheels" "$cuda" <<'PY'
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
PY
  rm -rf "$wheels"
fi
[[ -f $plugin ]] || { echo "gpu_check: no CUDA plugin at $plugin" >&2; exit 1; }
# For libraries the RUNPATH does not name (wheels that keep them under nvidia/<name>/lib).
if [[ -d $cuda/nvidia ]]; then
  LD_LIBRARY_PATH=$(find -L "$cuda/nvidia" -maxdepth 3 -type d -name lib | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
fi
export TITAN_PYTHON=$py TITAN_JAX_PYTHON=$py

# The CPU plugins' own tests (FFI handlers, the 0.81 plugin, the CPU device-count option) are the
# CPU suite's; here every other graph test runs its graph side on the GPU.
filter=${TITAN_GPU_TESTS:-'Pjrt*:Graph*:CudnnAttention*-PjrtFfi*:PjrtRuntime.CpuDeviceCountOptionIsHonoured:PjrtRuntime.BothCpuPluginsGiveTheSameNumbers:PjrtRuntime.XlaOptionsReachTheCompilation'}
status=0
if [[ $filter != none ]]; then
  # Every test process holds several clients at once (the tests' shared one, each trainer's): none
  # may take 75% of the GPU's memory up front, as the plugin's allocator does by default.
  TITAN_GRAPH_PLUGIN=cuda TITAN_GRAPH_PLUGIN_OPTIONS=${TITAN_GRAPH_PLUGIN_OPTIONS:-preallocate=false} \
    timeout "${TITAN_GPU_TEST_TIMEOUT:-150}" "$tests" --gtest_filter="$filter" || status=$?
  echo "gpu_check: tests exited with $status"
fi
(($# > 0)) || set -- '--benchmark_filter=train_step/XL$' --precision=bf16 "--torch=eager bf16,compile bf16" --jax=bf16 --rounds=1
timeout "${TITAN_GPU_BENCH_TIMEOUT:-240}" "$bench" --device=cuda "$@" || status=$?

ab=${TITAN_GPU_XLA_AB-';xla_gpu_enable_command_buffer=;xla_gpu_enable_latency_hiding_scheduler=true;xla_gpu_enable_triton_gemm=false'}
ab_args=${TITAN_GPU_XLA_AB_ARGS:---benchmark_filter=train_step/XL\$ --precision=bf16 --torch=none --jax=none --rounds=1 --steps=5}
if [[ $ab != none ]]; then
  echo "gpu_check: A/B, XLA's attention (compile.cudnn_attention = false)"
  # shellcheck disable=SC2086
  timeout "${TITAN_GPU_BENCH_TIMEOUT:-240}" "$bench" --device=cuda $ab_args --cudnn_attention=false || status=$?
  # An empty set (the default list's first) is XLA's defaults.
  IFS=';' read -r -a sets <<<"$ab"
  for set in "${sets[@]}"; do
    echo "gpu_check: A/B, XLA options '${set}'"
    # shellcheck disable=SC2086
    timeout "${TITAN_GPU_BENCH_TIMEOUT:-240}" "$bench" --device=cuda $ab_args "--xla_options=$set" || status=$?
  done
fi
exit "$status"
