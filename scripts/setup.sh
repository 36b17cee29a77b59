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
      libtcmalloc-minimal4  # the process malloc (cmake/dependencies.cmake says why)
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

# Graph mode's PJRT plugins and the PJRT C API header, from PyPI wheels (titan dlopens the plugin;
# no Python at run time). Like the venv, unpacked once per pinned list in ~/.cache/titan and
# linked as .pjrt. Layout (src/titan/graph/pjrt/plugin.cpp resolves the names):
#   include/pjrt_c_api.h            the header titan compiles against (API 0.81)
#   cpu/pjrt_c_api_cpu_plugin.so     the default CPU plugin (API 0.115)
#   cpu-xla-cpu-pjrt/xla_cpu_pjrt.so a second CPU plugin (API 0.81): the loader is tested on both
# Neither wheel is an official Google release (README.md, Graph mode).
PJRT_WHEELS=(xla-cpu-pjrt==0.0.1 lammps-jax-pjrt-cpu==0.11.2)
want=$(printf '%s\n' "${PJRT_WHEELS[@]}" | sha256sum | cut -c1-16)
pjrt=${TITAN_VENV_CACHE:-$HOME/.cache/titan}/pjrt-$want
(
  flock 9
  if [[ ! -f $pjrt/.complete ]]; then
    rm -rf "$pjrt"
    echo "setup: fetching the PJRT CPU plugins into $pjrt (${PJRT_WHEELS[*]}: about 125 MB)"
    mkdir -p "$pjrt/wheels"
    if ! .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps -d "$pjrt/wheels" \
           "${PJRT_WHEELS[@]}"; then
      echo "setup: pip download of ${PJRT_WHEELS[*]} failed; run it by hand:" >&2
      echo "  .venv/bin/python -m pip download --no-deps -d $pjrt/wheels ${PJRT_WHEELS[*]}" >&2
      exit 1
    fi
    # Only the plugins, the header and the licences: the wheels' Python wrappers are not used.
    python3 - "$pjrt" <<'PY'
import pathlib, sys, zipfile
root = pathlib.Path(sys.argv[1])
wanted = {
    "xla_cpu_pjrt-": {"xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h": "include/pjrt_c_api.h",
                      "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so": "cpu-xla-cpu-pjrt/xla_cpu_pjrt.so"},
    "lammps_jax_pjrt_cpu-": {"lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so": "cpu/pjrt_c_api_cpu_plugin.so",
                             ".dist-info/licenses/LICENSE": "cpu/LICENSE",
                             ".dist-info/licenses/THIRD_PARTY_NOTICES": "cpu/THIRD_PARTY_NOTICES"},
}
installed = []
for prefix, members in wanted.items():
    wheels = sorted((root / "wheels").glob(prefix + "*.whl"))
    if len(wheels) != 1:
        sys.exit(f"setup: expected one {prefix}*.whl in {root / 'wheels'}, found {len(wheels)}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        for suffix, target in members.items():
            # By suffix: the dist-info folder's name carries the version.
            found = [name for name in wheel.namelist() if name.endswith(suffix)]
            if len(found) != 1:
                sys.exit(f"setup: expected one member ending in {suffix} in {wheels[0]}, found {found}")
            out = root / target
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(wheel.read(found[0]))
            if out.suffix == ".so":
                out.chmod(0o755)
    installed.append(wheels[0].name)
(root / "WHEELS").write_text("".join(name + "\n" for name in installed))
PY
    rm -rf "$pjrt/wheels"
    touch "$pjrt/.complete"
  fi
) 9>"$pjrt.lock"
if [[ "$(readlink .pjrt 2>/dev/null)" != "$pjrt" ]]; then
  rm -rf .pjrt
  ln -s "$pjrt" .pjrt
fi
echo "setup: PJRT plugins in .pjrt from $(paste -sd' ' .pjrt/WHEELS)"
