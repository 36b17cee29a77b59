# titan.cpp — `make train` and `make test` do all the set-up on a fresh Debian machine. Each
# target sets up only what it needs (scripts/setup.sh): make build and make train titan's Debian
# packages and PJRT CPU plugins; make test and make bench the PyTorch reference venv (.venv) as
# well; make fuzz, make lint and make format clang's tools.
BUILD       ?= build
BUILD_ASAN  ?= build-asan
JOBS        ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure -j $(JOBS)
# ccache keys on compile lines relative to the clone, so a fresh clone (CI's) reuses the objects
# an earlier build of the same sources left in the machine's cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: all deps deps-test deps-rl deps-tools deps-all build train test build-asan test-asan fuzz bench format lint \
        gpu-bundle clean

all: build

deps:
	@scripts/setup.sh build
# The reference venv of the parity tests and the benchmarks (PyTorch 2, transformers 5: 5.7 GB).
deps-test: deps
	@scripts/setup.sh reference
# The GRPO benchmark's TRL reference venv (.venv-rl, bench/requirements-rl.txt: bench/grpo_trl.py).
deps-rl:
	@scripts/setup.sh rl
# clang, clang-format, clang-tidy.
deps-tools:
	@scripts/setup.sh tools
# All of it (CI's set-up).
deps-all:
	@scripts/setup.sh all

$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Trains the Llama 3 debug model on the bundled King James Bible (configs/llama3/debug.toml),
# then prints a sample from its final checkpoint; pass overrides with ARGS, e.g.
# make train ARGS="--training.steps=50". Run again, it resumes from its checkpoints: a finished
# run trains no further and prints the sample again; more steps continue from the latest full
# checkpoint. rm -rf outputs/llama3_debug/checkpoint starts over. CHECKPOINT is where the
# config saves (job.dump_folder/checkpoint.folder). It builds the titan command only, not the tests
# and benchmarks (make build).
CONFIG     ?= configs/llama3/debug.toml
ARGS       ?=
CHECKPOINT ?= outputs/llama3_debug/checkpoint
train: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target titan_cli
	$(BUILD)/titan train --config $(CONFIG) $(ARGS)
	$(BUILD)/titan generate --checkpoint $(CHECKPOINT) --prompt "In the beginning" --max-new-tokens 64

test: deps-test build
	cd $(BUILD) && ctest $(CTEST_FLAGS)

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer, caching allocator off so that
# use-after-free is caught rather than hidden by reuse. The release phase runs every test; this
# one leaves out the tests that take 30 s or more sanitized while a shorter sanitized test runs
# the same code, so that CI stays under 45 minutes:
#   graph mode: Llama 3's and Qwen 3's layouts over four devices, resume across modes and
#     layouts (GraphTrain.ResumesGraphEagerGraph resumes a graph run), the MoE layer loop under
#     each balancing and Qwen 3 dense over twenty steps (Qwen3MoeMatchesEagerDroplessLayer runs
#     Qwen 3's blocks and both balancing terms), custom kernels on and off
#     (GraphTrainCustomKernels.DocumentMaskingMatchesEager runs them);
#   checkpoints: the resume tests that kill or damage runs, keep the latest k, export or import
#     HF folders (Resume.TwentyStepsEqualTenThenResumeToTwentyBitForBit, AsyncSaveHoldsTheStateOfItsStep
#     and ACleanStopSavesAndTheNextRunContinuesFromThere run the manager's save and load);
#   generation from a trained run (GenerateCommand.ConvertedHfFolderGivesTheIdsOfInProcessGeneration
#     and GenerateFromCheckpoint run the command);
#   the dry run's initialised start-up of a 4-rank layout (the other DryRun tests plan it).
ASAN_SKIP_TESTS := \
  GraphParallel\.(Llama|Qwen3)LayoutsOverFourDevicesMatchOneDevice \
  GraphParallel\.ResumesAcrossLayoutsAndModes \
  GraphTrain\.ResumesAcrossModes \
  GraphTrain\.Qwen3MoeLayerLoopMatchesEagerWithEveryBalancing \
  GraphTrain\.Qwen3MatchesEagerOverTwentySteps \
  GraphTrainCustomKernels\.MatchesEagerOverTwentyStepsOnAndOff \
  Resume\.(KillsAtRandomMoments|DamagedOrForeign|ModelOnlyExportInBf16|FinalSaveInHf|KeepsTheLatestK|HfFolderOfAnotherModel|KilledDuringASave) \
  GenerateCommand\.(WithoutATokenizerOnlyIdsAreTaken|PrintsTheContinuationAndTokensPerSecond) \
  DryRun\.StartUpHoldsThisRanksShareOnly \
  FluxTrain\.GraphModeMatchesEagerCompilesOnceAndResumes
empty :=
space := $(empty) $(empty)
ASAN_SKIP ?= $(subst $(space),|,$(strip $(ASAN_SKIP_TESTS)))
build-asan: deps
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTITAN_SANITIZE=ON -DTITAN_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS) --target titan_unit_tests

test-asan: deps-test build-asan
	cd $(BUILD_ASAN) && TITAN_ALLOCATOR_CACHING=0 ASAN_OPTIONS=detect_leaks=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1 ctest $(CTEST_FLAGS) -L unit -E '$(ASAN_SKIP)'

# Every parser of outside input under libFuzzer (clang, ASan + UBSan, in build-fuzz): the inputs
# that once failed replayed, then each target fuzzed FUZZ_SECONDS from its seeds (fuzz/).
FUZZ_SECONDS ?= 60
fuzz: deps deps-tools
	JOBS=$(JOBS) scripts/fuzz.sh $(FUZZ_SECONDS)

# titan finds OpenBLAS's OpenMP build through its RUNPATH; PyTorch 2, the reference, brings its
# own MKL and oneDNN, so the benchmarks set no library path. JAX, bench_train_step's other
# reference, gets a venv of its own (.venv-jax) here, so that `make test` never downloads it.
bench: deps-test build
	scripts/setup_jax.sh
	TITAN_PYTHON=$(CURDIR)/.venv/bin/python TITAN_JAX_PYTHON=$(CURDIR)/.venv-jax/bin/python \
	  scripts/run_benchmarks.sh $(BUILD)

# What scripts/gpu_check.sh runs on a GPU machine that can neither fetch nor build: the graph tests
# and the train-step benchmark, built for any x86-64-v3 CPU (the device's is not this one), with
# the libraries they load, in build-gpu/titan-gpu.tar.xz (about 30 MB, under the device's 64 MiB).
gpu-bundle: deps
	cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_NATIVE=OFF \
	  -DCMAKE_CXX_FLAGS=-march=x86-64-v3 $(CMAKE_FLAGS)
	cmake --build build-gpu -j $(JOBS) --target titan_unit_tests bench_train_step fake_pjrt_plugin_0_50 \
	  fake_pjrt_plugin_1_81
	scripts/gpu_bundle.sh build-gpu build-gpu/titan-gpu.tar.xz

format: deps-tools
	find src tests bench -name '*.h' -o -name '*.cpp' | xargs clang-format -i

lint: deps deps-tools $(BUILD)/build.ninja
	find src -name '*.cpp' | xargs clang-tidy -p $(BUILD) --quiet

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-fuzz build-gpu
