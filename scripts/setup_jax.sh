#!/usr/bin/env bash
# The JAX venv of bench_train_step's JAX reference (bench/train_step_jax.py), linked as .venv-jax.
# Kept apart from .venv (requirements-test.txt) so that CI, which only tests, never downloads it;
# `make bench` runs this. Built once per pinned spec in ~/.cache/titan, as scripts/setup.sh builds
# .venv, so clones share it and an offline machine that has it needs no PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

# 0.10.2: what pip resolves for jax[cpu]>=0.10,<0.11 on Python 3.11 (the JAX of PJRT.md's figures).
spec='jax[cpu]==0.10.2'
want=$(printf '%s' "$spec" | sha256sum | cut -c1-16)
shared=${TITAN_VENV_CACHE:-$HOME/.cache/titan}/venv-jax-$want
mkdir -p "$(dirname "$shared")"
(
  flock 9
  if [[ ! -f $shared/.complete ]]; then
    rm -rf "$shared"
    echo "setup_jax: creating $shared ($spec, about 100 MB installed)"
    /usr/bin/python3 -m venv "$shared"
    if ! "$shared/bin/python" -m pip install -q --disable-pip-version-check "$spec"; then
      echo "setup_jax: pip install '$spec' failed; run it by hand:" >&2
      echo "  $shared/bin/python -m pip install '$spec'" >&2
      exit 1
    fi
    touch "$shared/.complete"
  fi
) 9>"$shared.lock"
if [[ "$(readlink .venv-jax 2>/dev/null)" != "$shared" ]]; then
  rm -rf .venv-jax
  ln -s "$shared" .venv-jax
fi
.venv-jax/bin/python -c "import jax" ||
  { echo "setup_jax: jax is not importable from .venv-jax ($shared); remove it and rerun" >&2; exit 1; }
