#!/usr/bin/env bash
# Runs every benchmark binary of a build, one after another (they would compete for the cores if
# run together), and keeps everything they print in <build>/bench-results.txt. Builds nothing.
#   scripts/run_benchmarks.sh [build-dir] [Google Benchmark flags, e.g. --benchmark_filter=gemm]
# The reference is PyTorch 2 from $TITAN_PYTHON (`make bench`: .venv), eager and torch.compile, on
# its own MKL and oneDNN; each benchmark sets OPENBLAS_CORETYPE for titan where OpenBLAS would pick
# kernels older than the CPU. bench_train_step also runs JAX from $TITAN_JAX_PYTHON (`make bench`:
# .venv-jax, from scripts/setup_jax.sh), the reference of titan's graph mode, and skips it when
# missing. bench_flux_encoders writes its models with diffusers and transformers from $TITAN_PYTHON
# (bench/flux_encoders_models.py) before timing titan's f32 and bf16 and every PyTorch variant on
# them. bench_flux_train_step times a FLUX training step against diffusers' FluxTransformer2DModel
# (bench/flux_models.py; --quick: flux-tiny only), bench_flux_sample text-to-image sampling against
# diffusers' FluxPipeline (bench/flux_sample_models.py writes the folder; --quick: 64 px only). A
# quick check: --benchmark_filter naming one case per benchmark. bench/grpo.py and
# bench/hf_decoders.py, Python drivers of the titan command, run last and take no such flags.
set -euo pipefail

build=${1:-build}
shift || true
out="$build/bench-results.txt"

shopt -s nullglob
benches=()
for b in "$build"/bench/bench_*; do
  if [[ -f $b && -x $b ]]; then benches+=("$b"); fi
done
if [[ ${#benches[@]} -eq 0 ]]; then
  echo "no benchmark binaries in $build/bench: build first (make build)" >&2
  exit 1
fi

{
  echo "titan benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$(dirname "$0")/.." rev-parse --short HEAD 2>/dev/null || echo 'no git')"
  echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "TITAN_PYTHON=${TITAN_PYTHON:-} TITAN_JAX_PYTHON=${TITAN_JAX_PYTHON:-} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-}"
} | tee "$out"
status=0
for b in "${benches[@]}"; do
  echo -e "\n===== $(basename "$b")" | tee -a "$out"
  "$b" "$@" 2>&1 | tee -a "$out" || status=1
done
# titan's bf16 (training.mixed_precision_param = "bfloat16") against PyTorch's bf16, where the CPU
# has the instructions titan's bf16 needs; bench_moe times its bf16 layer in the run above.
if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  for name in bench_train_step bench_attention; do
    flag=--precision=bf16
    [[ $name == bench_attention ]] && flag=--bf16
    if [[ -x $build/bench/$name ]]; then
      echo -e "\n===== $name $flag" | tee -a "$out"
      "$build/bench/$name" "$flag" "$@" 2>&1 | tee -a "$out" || status=1
    fi
  done
fi
# GRPO against TRL: a Python driver, where TRL's own venv is set up (make deps-rl).
root="$(dirname "$0")/.."
if [[ -x $root/.venv-rl/bin/python && -x $root/.venv/bin/python ]]; then
  echo -e "\n===== bench/grpo.py --bf16" | tee -a "$out"
  "$root/.venv/bin/python" "$root/bench/grpo.py" --titan "$build/titan" --bf16 2>&1 | tee -a "$out" || status=1
fi
# titan's hf family (Mistral-like, Gemma-2-like) against transformers' own classes: a Python driver
# that runs the titan command and the classes' training steps.
python=${TITAN_PYTHON:-$root/.venv/bin/python}
if [[ -x $python && -x $build/titan ]]; then
  echo -e "\n===== bench/hf_decoders.py" | tee -a "$out"
  "$python" "$root/bench/hf_decoders.py" --titan "$build/titan" --python "$python" 2>&1 | tee -a "$out" || status=1
fi
echo -e "\nresults in $out"
exit $status
