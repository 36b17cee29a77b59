#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, clang + libFuzzer + ASan + UBSan, in build-fuzz), replays every
# input that once made a target fail (fuzz/regressions/<target>/*), then fuzzes each target for
# SECONDS from its seed corpus (fuzz/corpus/<target>/, copied into a scratch folder: what the run
# finds is not written into the repository). Prints each target's executions and findings; exits
# non-zero on any finding. A finding's input is kept in build-fuzz/findings/<target>/; copy it into
# fuzz/regressions/<target>/ once the parser is fixed, so that every later run replays it.
#
#   scripts/fuzz.sh [SECONDS]        fuzz each target SECONDS (default 60) after the replay
#   scripts/fuzz.sh --replay-only    the build and the replay only
#   FUZZ_TARGETS="jsonl safetensors" scripts/fuzz.sh 30    some targets only
set -euo pipefail
cd "$(dirname "$0")/.."

replay_only=false
seconds=60
for arg in "$@"; do
  case $arg in
    --replay-only) replay_only=true ;;
    [0-9]*) seconds=$arg ;;
    *)
      echo "usage: scripts/fuzz.sh [--replay-only] [SECONDS]" >&2
      exit 2
      ;;
  esac
done

build=${FUZZ_BUILD:-build-fuzz}
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTITAN_FUZZ=ON \
    -DTITAN_BENCH=OFF >/dev/null
fi
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target fuzz_targets

targets=${FUZZ_TARGETS:-$(ls fuzz/corpus)}
# On tmpfs where there is one: the targets write every input to a file there.
scratch_root=${TMPDIR:-/tmp}
[[ -d /dev/shm && -w /dev/shm ]] && scratch_root=/dev/shm
scratch=$(mktemp -d "$scratch_root/titan-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# Where the targets write the files they hand the parsers (fuzz/fuzz_input.h).
export TITAN_FUZZ_SCRATCH=$scratch/files
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
limits=(-rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10)

# What a failing run says, short: the error, and the first of titan's frames in its stack.
summarize() {
  grep -E '==[0-9]+==ERROR|^SUMMARY|runtime error|terminate called|  what\(\)' "$1" | cut -c1-300 || true
  grep -E '^    #[0-9]+ .* in titan::' "$1" | head -n 3 | sed -E 's/\(.*\) (\/|\.\.)/ \1/' | cut -c1-300 || true
}

failed=()
for t in $targets; do
  inputs=(fuzz/regressions/"$t"/*)
  [[ -e ${inputs[0]} ]] || continue
  # Given files, a libFuzzer binary runs each once and stops at the first that fails.
  for input in "${inputs[@]}"; do
    if ! "$build/fuzz/fuzz_$t" "${limits[@]}" "$input" >"$scratch/replay.log" 2>&1; then
      summarize "$scratch/replay.log"
      echo "fuzz: $t fails on $input (replay)"
      failed+=("$t: $input")
    fi
  done
  echo "fuzz: $t replayed ${#inputs[@]} regression input(s)"
done

# One target per core at a time: each is single-threaded, so JOBS of them take the time of one.
fuzz_one() {
  local t=$1 corpus=$scratch/corpus/$1 findings=$build/findings/$1 rc=0
  mkdir -p "$corpus" "$findings"
  cp fuzz/corpus/"$t"/* "$corpus"/
  "$build/fuzz/fuzz_$t" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" >"$scratch/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$scratch/$t.rc"
}

if ! $replay_only; then
  for t in $targets; do
    while (($(jobs -rp | wc -l) >= ${JOBS:-$(nproc)})); do wait -n; done
    fuzz_one "$t" &
  done
  wait
  summary=()
  for t in $targets; do
    findings=$build/findings/$t rc=$(cat "$scratch/$t.rc")
    runs=$(sed -n 's/^stat::number_of_executed_\(runs\|units\): *//p' "$scratch/$t.log")
    if ((rc != 0)); then
      summarize "$scratch/$t.log"
      found=$(ls -t "$findings" | head -n 1)
      summary+=("$(printf '%-20s %10s runs in %4d s  FOUND: %s' "$t" "${runs:-?}" "$seconds" "$findings/$found")")
      failed+=("$t: $findings/$found")
    else
      summary+=("$(printf '%-20s %10s runs in %4d s  nothing found' "$t" "$runs" "$seconds")")
    fi
  done
  echo
  echo "fuzz: per target"
  printf '  %s\n' "${summary[@]}"
fi

if ((${#failed[@]})); then
  echo "fuzz: ${#failed[@]} finding(s):" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
