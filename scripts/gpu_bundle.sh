#!/usr/bin/env bash
# Packs a build's graph-mode tests and train-step benchmark, with the shared libraries they need,
# for a GPU machine that can neither fetch packages nor build (no network, no -dev packages):
#   scripts/gpu_bundle.sh BUILD_DIR OUT.tar.xz
# scripts/gpu_check.sh runs from it when TITAN_GPU_BUNDLE names it. For code that runs on any x86-64
# CPU of the last decade, build BUILD_DIR with -DTITAN_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3.
# glibc, libstdc++ and libgcc_s stay out: the target's own are newer, and its CUDA plugin and
# Python load them too; everything else ldd lists goes in, so that no soname is left to chance.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: scripts/gpu_bundle.sh BUILD_DIR OUT.tar.xz" >&2; exit 2; }
build=$(cd "$1" && pwd)
out=$2
if grep -q -- '-march=native' "$build/build.ninja" 2>/dev/null; then
  echo "gpu_bundle: warning: $build was built with -march=native for $(grep -m1 'model name' /proc/cpuinfo |
    cut -d: -f2-); another CPU may lack its instructions (rebuild with -DTITAN_NATIVE=OFF" \
    "-DCMAKE_CXX_FLAGS=-march=x86-64-v3 where that matters)" >&2
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
binaries=("$build/tests/titan_unit_tests" "$build/bench/bench_train_step")
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "gpu_bundle: $b missing: build titan_unit_tests and bench_train_step first" >&2; exit 1; }
  strip -o "$stage/bin/$(basename "$b")" "$b"
done
# The tests load these by their build path; gpu_check.sh puts them back there.
cp "$build"/tests/libfake_pjrt_plugin_*.so "$stage/bin/"
ldd "${binaries[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
# Paths compiled into the binaries (the source tree's configs and data, the build's fake plugins).
echo "$build" >"$stage/build_dir"
# The instructions the code may use, for gpu_check.sh to hold against the target's CPU: a native
# build the vector extensions of this CPU, a portable one AVX2 (x86-64-v3).
if grep -q -- '-march=native' "$build/build.ninja" 2>/dev/null; then
  grep -o -w -e avx2 -e avx512f -e avx512_bf16 -e amx_bf16 /proc/cpuinfo | sort -u | paste -sd' ' >"$stage/cpu_flags"
else
  echo avx2 >"$stage/cpu_flags"
fi
grep -m1 '^CMAKE_HOME_DIRECTORY' "$build/CMakeCache.txt" | cut -d= -f2 >"$stage/source_dir"
tar -C "$stage" -cf - . | xz -6 -T2 >"$out"
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1)): $(ls "$stage/bin" | paste -sd' '); $(ls "$stage/lib" | wc -l) libraries"
