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

# Native libraries from PyPI wheels, fetched with Debian's pip (no venv; titan loads them without
# Python) and unpacked once per pinned list in ~/.cache/titan, linked from the clone.
#   wheels NAME LINK WHAT MEMBERS WHEEL...: fetches the wheels into $cache/NAME-<hash>, keeps only
#   MEMBERS (a JSON object {wheel-name prefix: {member suffix: target}}; a suffix ending in "/"
#   keeps everything under it), writes WHEELS (their names) and links LINK to it.
wheels() {
  local name=$1 link=$2 what=$3 members=$4
  shift 4
  local want dir
  want=$(printf '%s\n' "$@" | sha256sum | cut -c1-16)
  dir=$cache/$name-$want
  (
    flock 9
    if [[ ! -f $dir/.complete ]]; then
      rm -rf "$dir"
      echo "setup: fetching $what into $dir ($*)"
      mkdir -p "$dir/wheels"
      # Debian's pip: PEP 668 keeps it from installing into the system's Python, not from
      # downloading, and the wheels are unpacked below rather than installed.
      if ! /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps -d "$dir/wheels" "$@"; then
        echo "setup: pip download of $* failed; run it by hand:" >&2
        echo "  /usr/bin/python3 -m pip download --no-deps -d $dir/wheels $*" >&2
        exit 1
      fi
      /usr/bin/python3 - "$dir" "$members" <<'PY'
import json, pathlib, sys, zipfile
root, wanted = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2])
installed = []
for prefix, members in wanted.items():
    wheels = sorted((root / "wheels").glob(prefix + "*.whl"))
    if len(wheels) != 1:
        sys.exit(f"setup: expected one {prefix}*.whl in {root / 'wheels'}, found {len(wheels)}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        for suffix, target in members.items():
            # By suffix: the dist-info and data folders' names carry the version.
            if suffix.endswith("/"):
                found = {n: target + n.split(suffix, 1)[1] for n in names if suffix in n and not n.endswith("/")}
            else:
                found = {n: target for n in names if n.endswith(suffix)}
                if len(found) != 1:
                    sys.exit(f"setup: expected one member ending in {suffix} in {wheels[0]}, found {list(found)}")
            if not found:
                sys.exit(f"setup: nothing under {suffix} in {wheels[0]}")
            for member, target_path in found.items():
                out = root / target_path
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(wheel.read(member))
                if ".so" in out.name:
                    out.chmod(0o755)
    installed.append(wheels[0].name)
(root / "WHEELS").write_text("".join(name + "\n" for name in installed))
PY
      rm -rf "$dir/wheels"
      touch "$dir/.complete"
    fi
  ) 9>"$dir.lock"
  if [[ "$(readlink "$link" 2>/dev/null)" != "$dir" ]]; then
    rm -rf "$link"
    ln -s "$dir" "$link"
  fi
  echo "setup: $what in $link from $(paste -sd' ' "$link/WHEELS")"
}

if $build; then
  # Graph mode's PJRT plugins and the PJRT C API header. Layout (src/titan/graph/pjrt/plugin.cpp
  # resolves the names):
  #   include/pjrt_c_api.h            the header titan compiles against (API 0.81)
  #   cpu/pjrt_c_api_cpu_plugin.so     the default CPU plugin (API 0.115)
  #   cpu-xla-cpu-pjrt/xla_cpu_pjrt.so a second CPU plugin (API 0.81): the loader is tested on both
  # Neither wheel is an official Google release (README.md, Graph mode).
  wheels pjrt .pjrt "the PJRT CPU plugins (about 125 MB)" '{
      "xla_cpu_pjrt-": {"xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h": "include/pjrt_c_api.h",
                        "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so": "cpu-xla-cpu-pjrt/xla_cpu_pjrt.so"},
      "lammps_jax_pjrt_cpu-": {"lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so": "cpu/pjrt_c_api_cpu_plugin.so",
                               ".dist-info/licenses/LICENSE": "cpu/LICENSE",
                               ".dist-info/licenses/THIRD_PARTY_NOTICES": "cpu/THIRD_PARTY_NOTICES"}}' \
    xla-cpu-pjrt==0.0.1 lammps-jax-pjrt-cpu==0.11.2
  # oneDNN 3.2 (bf16 matrix products and convolutions: kernels/cpu/onednn_*.cpp), Intel's build
  # for GNU OpenMP, the thread pool OpenBLAS and titan's kernels share. Debian 12 has only oneDNN
  # 2.6-2.7, whose AMX kernels lag: on an AMX Xeon titan's bf16 text encoders ran no faster than
  # on Zen 4's AVX512-BF16 while PyTorch's (oneDNN 3.13) ran 2.8x faster. The newer "onednn" wheels
  # are SYCL and TBB builds titan cannot link. Only libdnnl.so.3 is kept (the wheel carries three
  # copies of it); cmake/dependencies.cmake links it from .onednn.
  wheels onednn .onednn "oneDNN 3.2 (about 40 MB)" '{
      "onednn_cpu_gomp-": {".data/data/lib/libdnnl.so.3": "lib/libdnnl.so.3",
                           ".dist-info/LICENSE.txt": "LICENSE",
                           ".data/data/share/doc/onednn/THIRD-PARTY-PROGRAMS": "THIRD-PARTY-PROGRAMS"},
      "onednn_devel_cpu_gomp-": {".data/data/include/oneapi/dnnl/": "include/oneapi/dnnl/"}}' \
    onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0
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
