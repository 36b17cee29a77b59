#!/usr/bin/env bash
# Graph mode on an NVIDIA GPU through the CUDA 13 PJRT plugin, as one device call:
#   1. bench_train_step --device=cuda: titan graph against PyTorch 2 and JAX on the same GPU (by
#      default XL in bf16 against torch eager and compile bf16 and JAX bf16 with cuDNN attention,
#      one round);
#   2. the Pjrt*, Graph* and CudnnAttention* tests with TITAN_GRAPH_PLUGIN=cuda (the graph side on
#      the GPU, the eager side on the host, compared), in 4 parallel shards;
#   3. A/B runs of titan's step alone: XLA's attention instead of cuDNN's (the figure that remains
#      if cuDNN's attention cannot run), then each XLA option set of TITAN_GPU_XLA_AB.
#   scripts/gpu_check.sh [bench_train_step flags, replacing step 1's defaults]
# The stages share one deadline (TITAN_GPU_DEADLINE seconds from the start, default 540: one
# 600-second device call), each cut to what is left; the benchmark comes first, as it is what the
# call is for. Each stage's output goes to the terminal and to $OUT/<stage>.log (the device
# tool's folder that comes back; build/gpu_check without one), and $OUT/summary.txt gathers the
# tables and the tests' verdicts, so a cut-off run still returns what it measured.
#
# On the device (no network, no -dev packages) it runs from a bundle built here:
#   make gpu-bundle                      # build-gpu/titan-gpu.tar.xz, ~30 MB, any x86-64-v3 CPU
#   device call: carry ["build-gpu/titan-gpu.tar.xz"], timeout_s 580, command
#     TITAN_GPU_BUNDLE=build-gpu/titan-gpu.tar.xz scripts/gpu_check.sh
#   A second call for the 3B shape and XLA's options:
#     TITAN_GPU_BUNDLE=... TITAN_GPU_TESTS=none TITAN_GPU_XLA_AB=';xla_gpu_enable_command_buffer=;xla_gpu_enable_latency_hiding_scheduler=true;xla_gpu_enable_triton_gemm=false' \
#       scripts/gpu_check.sh '--benchmark_filter=train_step/3B$' --precision=bf16 '--torch=eager bf16,compile bf16' --jax=bf16 --rounds=1
# Environment:
#   TITAN_GPU_PYTHON  the Python whose torch (CUDA build) and jax run the references (default python3)
#   TITAN_GPU_BUNDLE  a tarball from scripts/gpu_bundle.sh: run its binaries instead of building
#   TITAN_GPU_TESTS   gtest filter (default: the graph, PJRT and cuDNN-attention tests that need no
#                     CPU plugin file); "none" skips the tests
#   TITAN_GRAPH_PLUGIN_OPTIONS  the tests' client options (default preallocate=false)
#   TITAN_GPU_DEADLINE, TITAN_GPU_TEST_TIMEOUT, TITAN_GPU_BENCH_TIMEOUT  seconds: all stages, the
#                     tests, the benchmark (defaults 540, 150, 300; each cut to what is left)
#   TITAN_GPU_XLA_AB  XLA option sets (compile.xla_options) to A/B after the XLA-attention run,
#                     separated by ';' (an empty set is XLA's defaults); "none" skips the A/B stage
#                     whole. Default: none beyond the XLA-attention run
#   TITAN_GPU_XLA_AB_ARGS  bench_train_step flags of each A/B run (default: config XL, titan graph
#                     bf16 alone, 1 round of 5 steps)
# The CUDA plugin: .pjrt/cuda when present; else the one in TITAN_GPU_PYTHON's jax-cuda13-pjrt
# (linked there, with its NVIDIA libraries); else the wheels jax-cuda13-pjrt and
# jax-cuda13-plugin[with-cuda] are downloaded into .pjrt/cuda (about 3 GB; needs the network).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
start=$SECONDS
deadline=${TITAN_GPU_DEADLINE:-540}
logs=${OUT:-$repo/build/gpu_check}
mkdir -p "$logs"
summary=$logs/summary.txt
: >"$summary"
status=0

# Seconds a stage may take: its own limit, or what is left before the deadline.
budget() {
  local left=$((deadline - (SECONDS - start)))
  ((left < $1)) && echo "$left" || echo "$1"
}
# Runs a command within `seconds`, its output to the terminal and to $logs/<name>.log; a stage
# left no time is skipped, and a failure (or the time running out) is noted, not fatal.
stage() {
  local name=$1 seconds=$2
  shift 2
  if ((seconds < 10)); then
    echo "gpu_check: $name skipped: the deadline ($deadline s) is reached" | tee -a "$summary"
    return 0
  fi
  echo "gpu_check: $name (at most ${seconds} s)"
  local rc=0
  timeout "$seconds" "$@" 2>&1 | tee "$logs/$name.log" || rc=$?
  ((rc == 124)) && echo "gpu_check: $name ran out of its ${seconds} s" | tee -a "$summary"
  ((rc == 0)) || { echo "gpu_check: $name exited with $rc" | tee -a "$summary"; status=$rc; }
  return 0
}

{
  nvidia-smi -L || { echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed)"; exit 1; }
  echo "cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); $(nproc) cores;" \
    "$(grep -o -w -e avx2 -e avx512f -e avx512_bf16 -e amx_bf16 /proc/cpuinfo | sort -u | paste -sd' ')"
  ldd --version | head -1
} 2>&1 | tee "$logs/pre.log"
# A path: the benchmark runs it as given, not through PATH.
py=$(command -v "${TITAN_GPU_PYTHON:-python3}") || { echo "gpu_check: no ${TITAN_GPU_PYTHON:-python3} on PATH" >&2; exit 1; }

if [[ -n ${TITAN_GPU_BUNDLE:-} ]]; then
  bundle=$(mktemp -d)
  # Without xz (a bare image), Python's lzma unpacks it.
  if command -v xz >/dev/null; then
    xz -dc "$TITAN_GPU_BUNDLE" | tar -C "$bundle" -xf -
  else
    "$py" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' \
      "$TITAN_GPU_BUNDLE" | tar -C "$bundle" -xf -
  fi
  # A bundle built for this CPU's family only (-march=native) needs its instructions.
  flags=()
  [[ -f $bundle/cpu_flags ]] && read -r -a flags <"$bundle/cpu_flags"
  for flag in "${flags[@]}"; do
    grep -q -w "$flag" /proc/cpuinfo ||
      { echo "gpu_check: the bundle was built -march=native on a CPU with $flag, which this one lacks; make gpu-bundle builds one for any x86-64-v3 CPU" >&2; exit 1; }
  done
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
  # For titan's binaries only: the references' Python keeps its own libraries.
  titan_libs=$bundle/lib
else
  scripts/setup.sh
  make build
  tests=build/tests/titan_unit_tests bench=build/bench/bench_train_step
  titan_libs=
fi

export TITAN_PJRT_DIR=${TITAN_PJRT_DIR:-$repo/.pjrt}
cuda=$TITAN_PJRT_DIR/cuda
plugin=$cuda/jax_plugins/xla_cuda13/xla_cuda_plugin.so
site=$("$py" -c 'import importlib.util as u, os
s = u.find_spec("jax_plugins.xla_cuda13")
print(os.path.dirname(os.path.dirname(os.path.dirname(s.origin))) if s and s.origin else "")' 2>>"$logs/pre.log" || true)
if [[ ! -f $plugin && -n $site && -f $site/jax_plugins/xla_cuda13/xla_cuda_plugin.so ]]; then
  echo "gpu_check: the CUDA plugin of $py's jax-cuda13-pjrt ($site)" | tee -a "$logs/pre.log"
  mkdir -p "$cuda"
  ln -sfn "$site/jax_plugins" "$cuda/jax_plugins"
  [[ -d $site/nvidia ]] && ln -sfn "$site/nvidia" "$cuda/nvidia"
elif [[ ! -f $plugin ]]; then
  wheels=$(mktemp -d)
  echo "gpu_check: no jax-cuda13-pjrt in $py ($(tail -1 "$logs/pre.log")); downloading the plugin and its NVIDIA libraries"
  # With dependencies: the with-cuda extra is the NVIDIA wheels (cuBLAS, cuDNN, NCCL, ...). No
  # retries: a machine without the network should fail here at once.
  "$py" -m pip download -q --disable-pip-version-check --retries 0 --timeout 20 -d "$wheels" jax-cuda13-pjrt \
    "jax-cuda13-plugin[with-cuda]"
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
# titan's binaries: the bundle's libraries, and the NVIDIA libraries the plugin's RUNPATH does not
# name (wheels that keep them under nvidia/<name>/lib).
nvidia_libs=
[[ -d $cuda/nvidia ]] && nvidia_libs=$(find -L "$cuda/nvidia" -maxdepth 3 -type d -name lib | paste -sd:)
titan_path=$titan_libs${titan_libs:+${nvidia_libs:+:}}$nvidia_libs
titan_env=(env "LD_LIBRARY_PATH=$titan_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
export TITAN_PYTHON=$py TITAN_JAX_PYTHON=$py
# torch.compile's compile workers: the machine's cores, not the 2-core default of titan's host.
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-$(nproc)} PYTHONUNBUFFERED=1

# 1. The benchmark.
(($# > 0)) || set -- '--benchmark_filter=train_step/XL$' --precision=bf16 "--torch=eager bf16,compile bf16" --jax=bf16 --rounds=1
bench_seconds=$(budget "${TITAN_GPU_BENCH_TIMEOUT:-300}")
if [[ " $* " != *" --benchmark_filter=none "* ]]; then
  stage bench "$bench_seconds" "${titan_env[@]}" "$bench" --device=cuda "$@"
  # The tables: from the first table's title to the end.
  [[ -f $logs/bench.log ]] && sed -n '/^== /,$p' "$logs/bench.log" >>"$summary" || true
fi

# 2. The tests, in 4 shards side by side. The CPU plugins' own tests (FFI handlers, the 0.81 plugin,
# the CPU device-count option) are the CPU suite's; here every other graph test runs its graph side
# on the GPU. Every test process holds several clients at once (the tests' shared one, each
# trainer's): none may take 75% of the GPU's memory up front, as the plugin's allocator does.
filter=${TITAN_GPU_TESTS:-'Pjrt*:Graph*:CudnnAttention*-PjrtFfi*:PjrtRuntime.CpuDeviceCountOptionIsHonoured:PjrtRuntime.BothCpuPluginsGiveTheSameNumbers:PjrtRuntime.XlaOptionsReachTheCompilation'}
if [[ $filter != none ]]; then
  # Shard i writes tests.shard<i>; `timeout` ends the whole group of them.
  # shellcheck disable=SC2016
  shards='pids=()
    for i in 0 1 2 3; do
      GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i "$@" >"$LOGS/tests.shard$i" 2>&1 &
      pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    exit "$rc"'
  threads=$(($(nproc) / 4 > 0 ? $(nproc) / 4 : 1))
  stage tests "$(budget "${TITAN_GPU_TEST_TIMEOUT:-150}")" env LOGS="$logs" OMP_NUM_THREADS="$threads" \
    TITAN_GRAPH_PLUGIN=cuda TITAN_GRAPH_PLUGIN_OPTIONS="${TITAN_GRAPH_PLUGIN_OPTIONS:-preallocate=false}" \
    bash -c "$shards" shards "${titan_env[@]}" "$tests" --gtest_filter="$filter"
  # The shards' output, as far as each got.
  if [[ -f $logs/tests.shard0 ]]; then
    cat "$logs"/tests.shard[0-3] >"$logs/tests.log"
    rm -f "$logs"/tests.shard[0-3]
  fi
  [[ -f $logs/tests.log ]] && grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\]|tests? from .* ran' "$logs/tests.log" >>"$summary" || true
fi

# 3. A/B runs of titan's step alone.
ab=${TITAN_GPU_XLA_AB-}
ab_args=${TITAN_GPU_XLA_AB_ARGS:---benchmark_filter=train_step/XL\$ --precision=bf16 --torch=none --jax=none --rounds=1 --steps=5}
if [[ $ab != none ]]; then
  # shellcheck disable=SC2086
  stage ab_xla_attention "$(budget 240)" "${titan_env[@]}" "$bench" --device=cuda $ab_args --cudnn_attention=false
  [[ -f $logs/ab_xla_attention.log ]] &&
    { echo "A/B: XLA's attention (compile.cudnn_attention = false)"; sed -n '/^== /,$p' "$logs/ab_xla_attention.log"; } >>"$summary" || true
  if [[ -n $ab ]]; then
    IFS=';' read -r -a sets <<<"$ab"
    for i in "${!sets[@]}"; do
      # shellcheck disable=SC2086
      stage "ab_xla_options_$i" "$(budget 240)" "${titan_env[@]}" "$bench" --device=cuda $ab_args "--xla_options=${sets[$i]}"
      [[ -f $logs/ab_xla_options_$i.log ]] &&
        { echo "A/B: XLA options '${sets[$i]}'"; sed -n '/^== /,$p' "$logs/ab_xla_options_$i.log"; } >>"$summary" || true
    done
  fi
fi
echo "gpu_check: done in $((SECONDS - start)) s, exit $status" >>"$summary"
echo "== gpu_check summary ($summary)"
cat "$summary"
exit "$status"
