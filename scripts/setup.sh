#!/usr/bin/env bash
# Installs what is missing for one or more parts of the project, each named on the command line:
#   build      (the default) what titan needs to build and run: Debian packages (compilers,
#              libraries, MPI, the test and benchmark frameworks) and the PJRT CPU plugins (.pjrt).
#              make build and make train; no PyTorch.
#   tools      clang, clang-format and clang-tidy: make fuzz, make lint, make format.
#   reference  the PyTorch 2 + transformers 5 reference venv (.venv, requirements-test.txt, 5.7 GB):
#              make test and make bench.
#   rl         the GRPO benchmark's TRL venv (.venv-rl, bench/requirements-rl.txt: PyTorch 2,
#              transformers 5 and trl; as large as .venv): bench/grpo_trl.py. Not part of all.
#   all        build, tools and reference (CI's set-up).
# Debian packages are installed as root through apt-get; otherwise the command is printed.
# Downloads are made once per pinned list in ~/.cache/titan ($TITAN_VENV_CACHE), which every clone
# links to, so an offline machine that has them needs no network.
set -euo pipefail
cd "$(dirname "$0")/.."

build=false tools=false reference=false rl=false
(($#)) || set -- build
for part in "$@"; do
  case $part in
    build) build=true ;;
    tools) tools=true ;;
    reference) reference=true ;;
    rl) rl=true ;;
    all) build=true tools=true reference=true ;;
    *)
      echo "usage: scripts/setup.sh [build] [tools] [reference] [rl] [all]   (default: build)" >&2
      exit 2
      ;;
  esac
done
cache=${TITAN_VENV_CACHE:-$HOME/.cache/titan}
mkdir -p "$cache"

PKGS=()
if $build; then
  PKGS+=(build-essential cmake ninja-build ccache pkg-config
         libopenblas-openmp-dev libtomlplusplus-dev nlohmann-json3-dev zlib1g-dev
         libpng-dev libjpeg62-turbo-dev  # the image data sets (data/image/)
         libgtest-dev libgmock-dev libbenchmark-dev  # the build configures the tests and benchmarks
         python3 python3-pip  # the layer check (a test); pip download fetches the PJRT plugins
         libprotobuf-dev protobuf-compiler
         libpcre2-dev libicu-dev
         libtcmalloc-minimal4  # the process malloc (cmake/dependencies.cmake says why)
         libdnnl-dev  # oneDNN: bf16 matmuls on AVX512-BF16 and AMX (training.mixed_precision_param)
         openmpi-bin libopenmpi-dev)
fi
if $tools; then
  PKGS+=(clang-format clang-tidy
         clang libclang-rt-dev)  # libFuzzer and the sanitizers' runtimes for make fuzz
fi
if $reference || $rl; then
  PKGS+=(python3 python3-venv)
fi

installed() {
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0))
}
if ! installed; then
  if [[ $(id -u) -eq 0 ]]; then
    # One apt-get at a time: make -j may run two parts' set-up together.
    (
      flock 9
      if ! installed; then
        echo "setup: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
      fi
    ) 9>"$cache/apt.lock"
  else
    echo "setup: missing Debian packages; run:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# Graph mode's PJRT plugins and the PJRT C API header, from PyPI wheels (titan dlopens the plugin;
# no Python at run time), fetched with Debian's pip (no venv). Unpacked once per pinned list in
# ~/.cache/titan and linked as .pjrt. Layout (src/titan/graph/pjrt/plugin.cpp resolves the names):
#   include/pjrt_c_api.h            the header titan compiles against (API 0.81)
#   cpu/pjrt_c_api_cpu_plugin.so     the default CPU plugin (API 0.115)
#   cpu-xla-cpu-pjrt/xla_cpu_pjrt.so a second CPU plugin (API 0.81): the loader is tested on both
# Neither wheel is an official Google release (README.md, Graph mode).
if $build; then
  PJRT_WHEELS=(xla-cpu-pjrt==0.0.1 lammps-jax-pjrt-cpu==0.11.2)
  want=$(printf '%s\n' "${PJRT_WHEELS[@]}" | sha256sum | cut -c1-16)
  pjrt=$cache/pjrt-$want
  (
    flock 9
    if [[ ! -f $pjrt/.complete ]]; then
      rm -rf "$pjrt"
      echo "setup: fetching the PJRT CPU plugins into $pjrt (${PJRT_WHEELS[*]}: about 125 MB)"
      mkdir -p "$pjrt/wheels"
      # Debian's pip: PEP 668 keeps it from installing into the system's Python, not from
      # downloading, and the wheels are unpacked below rather than installed.
      if ! /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps -d "$pjrt/wheels" \
             "${PJRT_WHEELS[@]}"; then
        echo "setup: pip download of ${PJRT_WHEELS[*]} failed; run it by hand:" >&2
        echo "  /usr/bin/python3 -m pip download --no-deps -d $pjrt/wheels ${PJRT_WHEELS[*]}" >&2
        exit 1
      fi
      # Only the plugins, the header and the licences: the wheels' Python wrappers are not used.
      /usr/bin/python3 - "$pjrt" <<'PY'
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
fi

# The Python venvs (PyPI's torch 2 and transformers 5) are large, so each is built once per
# requirements file (by its hash: any edit, a comment's too, makes a new venv) in ~/.cache/titan
# and a link in the clone points to it: every clone of the project (CI's too) shares it. pip runs
# only to build it, so an offline machine that has it does not need PyPI.
#   venv NAME REQUIREMENTS LINK MODULES...: builds or reuses the venv and checks that MODULES import.
venv() {
  local name=$1 requirements=$2 link=$3
  shift 3
  local want shared
  want=$(sha256sum "$requirements" | cut -c1-16)
  shared=$cache/$name-$want
  (
    flock 9
    if [[ ! -f $shared/.complete ]]; then
      rm -rf "$shared"
      echo "setup: creating $shared from $requirements (PyPI torch 2 with its CUDA libraries: about 2.9 GB to download, 5.7 GB installed)"
      /usr/bin/python3 -m venv "$shared"
      if ! "$shared/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"; then
        echo "setup: pip install -r $requirements failed; run it by hand:" >&2
        echo "  $shared/bin/python -m pip install -r $requirements" >&2
        exit 1
      fi
      touch "$shared/.complete"
    fi
  ) 9>"$shared.lock"
  if [[ "$(readlink "$link" 2>/dev/null)" != "$shared" ]]; then
    rm -rf "$link"
    ln -s "$shared" "$link"
  fi
  local IFS=,
  "$link/bin/python" -c "import $*" ||
    { echo "setup: one of $* is not importable from $link ($shared); remove it and rerun" >&2; exit 1; }
}
if $reference; then
  venv venv requirements-test.txt .venv torch transformers
  # CLIP's BPE merges (OpenAI's bpe_simple_vocab_16e6.txt.gz), which the CLIP tokenizer tests build
  # their 49,408-id vocabulary from (tests/tokenizer/make_flux_fixtures.py): PyPI ships them in
  # open_clip_torch's wheel; only that file is kept, in ~/.cache/titan/openclip-3.3.0.
  clip_bpe=$cache/openclip-3.3.0
  (
    flock 9
    if [[ ! -f $clip_bpe/.complete ]]; then
      rm -rf "$clip_bpe"
      echo "setup: fetching CLIP's BPE merges from open_clip_torch==3.3.0 into $clip_bpe (1.5 MB)"
      mkdir -p "$clip_bpe/wheel"
      if ! /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps -d "$clip_bpe/wheel" \
        open_clip_torch==3.3.0; then
        echo "setup: pip download of open_clip_torch==3.3.0 failed; run it by hand:" >&2
        echo "  /usr/bin/python3 -m pip download --no-deps -d $clip_bpe/wheel open_clip_torch==3.3.0" >&2
        exit 1
      fi
      /usr/bin/python3 - "$clip_bpe" <<'PY'
import pathlib, sys, zipfile
root = pathlib.Path(sys.argv[1])
wheels = sorted((root / "wheel").glob("open_clip_torch-*.whl"))
if len(wheels) != 1:
    sys.exit(f"setup: expected one open_clip_torch-*.whl in {root / 'wheel'}, found {len(wheels)}")
with zipfile.ZipFile(wheels[0]) as wheel:
    (root / "bpe_simple_vocab_16e6.txt.gz").write_bytes(wheel.read("open_clip/bpe_simple_vocab_16e6.txt.gz"))
PY
      rm -rf "$clip_bpe/wheel"
      touch "$clip_bpe/.complete"
    fi
  ) 9>"$clip_bpe.lock"
fi
if $rl; then
  venv venv-rl bench/requirements-rl.txt .venv-rl torch transformers trl
fi
