#!/usr/bin/env bash
# Installs what the build and the tests need, if missing: Debian packages (as root through
# apt-get; otherwise prints the command) and a Python venv for the PyTorch reference tests.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build ccache pkg-config
      libopenblas-openmp-dev libtomlplusplus-dev nlohmann-json3-dev zlib1g-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      python3 python3-venv python3-torch python3-numpy
      libprotobuf-dev protobuf-compiler
      libpcre2-dev libicu-dev
      openmpi-bin libopenmpi-dev
      clang-format clang-tidy)

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

# Debian's torch is visible only to Debian's python3: build the venv from it, with system
# site-packages, so PyPI packages installed here and Debian's torch meet.
if [[ ! -x .venv/bin/python ]] || ! .venv/bin/python -c "import torch" 2>/dev/null; then
  rm -rf .venv
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
# pip runs only when requirements-test.txt changed since the last successful install, so an
# offline machine that has the packages already does not need PyPI.
if [[ -f requirements-test.txt ]]; then
  want=$(sha256sum requirements-test.txt | cut -d' ' -f1)
  have=$(cat .venv/.requirements-test.sha256 2>/dev/null || true)
  if [[ "$want" != "$have" ]]; then
    if ! .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-test.txt; then
      echo "setup: pip install -r requirements-test.txt failed; run it by hand:" >&2
      echo "  .venv/bin/python -m pip install -r requirements-test.txt" >&2
      exit 1
    fi
    echo "$want" > .venv/.requirements-test.sha256
  fi
fi
.venv/bin/python -c "import torch" || { echo "setup: torch is not importable from .venv" >&2; exit 1; }
