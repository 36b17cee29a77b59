#!/usr/bin/env bash
# Installs what the build and the tests need, if missing: Debian packages (as root through
# apt-get; otherwise prints the command) and a Python venv for the PyTorch reference tests.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build ccache pkg-config
      libopenblas-openmp-dev libtomlplusplus-dev nlohmann-json3-dev zlib1g-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      python3 python3-venv
      libprotobuf-dev protobuf-compiler
      libpcre2-dev libicu-dev
      libdnnl-dev  # oneDNN: bf16 matmuls on AVX512-BF16 and AMX (training.mixed_precision_param)
      openmpi-bin libopenmpi-dev
      clang-format clang-tidy
      clang libclang-rt-dev)  # libFuzzer and the sanitizers' runtimes for make fuzz

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "setup: missing Debian packages; run:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# The reference venv (PyPI's torch 2 and transformers 5, requirements-test.txt) is large, so it
# is built once per requirements file in ~/.cache/titan and .venv links to it: every clone of
# the project (CI's too) shares it. pip runs only to build it, so an offline machine that has it
# does not need PyPI.
want=$(sha256sum requirements-test.txt | cut -c1-16)
shared=${TITAN_VENV_CACHE:-$HOME/.cache/titan}/venv-$want
mkdir -p "$(dirname "$shared")"
(
  flock 9
  if [[ ! -f $shared/.complete ]]; then
    rm -rf "$shared"
    echo "setup: creating $shared (PyPI torch 2 with its CUDA libraries: about 2.9 GB to download, 5.7 GB installed)"
    /usr/bin/python3 -m venv "$shared"
    if ! "$shared/bin/python" -m pip install -q --disable-pip-version-check -r requirements-test.txt; then
      echo "setup: pip install -r requirements-test.txt failed; run it by hand:" >&2
      echo "  $shared/bin/python -m pip install -r requirements-test.txt" >&2
      exit 1
    fi
    touch "$shared/.complete"
  fi
) 9>"$shared.lock"
if [[ "$(readlink .venv 2>/dev/null)" != "$shared" ]]; then
  rm -rf .venv
  ln -s "$shared" .venv
fi
.venv/bin/python -c "import torch, transformers" ||
  { echo "setup: torch or transformers is not importable from .venv ($shared); remove it and rerun" >&2; exit 1; }
