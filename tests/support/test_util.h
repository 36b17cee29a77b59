#pragma once
// Shared test helpers: comparisons that report where tensors differ, random inputs, and an
// assertion that an error message names what it should.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "support/paths.h"
#include "titan/core/tensor.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/nn/module.h"

namespace titan::test {

// max |a - b| / max(|b|_inf, floor): one relative figure per tensor, robust to near-zero entries.
double max_rel_error(const Tensor& a, const Tensor& ref, double floor = 1e-6);

// Asserts shape equality and max_rel_error <= tol, naming `what` on failure.
::testing::AssertionResult tensors_close(const Tensor& a, const Tensor& ref, double tol,
                                         const std::string& what = "");

// Random f64 leaf requiring grad (for gradcheck) or f32 tensor, from a fixed stream.
Tensor rand_f64(const Shape& s, uint64_t seed, bool requires_grad = true, double lo = -1, double hi = 1);
Tensor rand_f32(const Shape& s, uint64_t seed, double lo = -1, double hi = 1);

// A fresh, empty folder "titan_tests_<pid>/<name>" under the system's temporary folder: tests of
// one process may share it by name, two runs of the suite at once never meet, and it is removed
// when the process's tests have all passed.
std::filesystem::path fresh_temp_dir(const std::string& name);
// The same folder, without emptying it.
std::filesystem::path temp_dir(const std::string& name);

// A file's bytes ("" when it cannot be read).
std::string slurp(const std::filesystem::path& p);

// What `titan` printed and its exit status (-1: it did not exit normally).
struct CliRun {
  int rc = -1;
  std::string out, err;
};
// `titan ARGS < stdin_text`, each argument quoted for the shell, run from the source tree (where
// data/ is); its stdin, stdout and stderr pass through files in `dir`.
CliRun run_titan(const std::vector<std::string>& args, const std::filesystem::path& dir,
                 const std::string& stdin_text = "");

// Same dtype, shape and bytes.
bool same_bits(const Tensor& a, const Tensor& b);
// `got` holds exactly `want`'s names, each tensor with the same bits.
void expect_same_state(const nn::StateDict& got, const nn::StateDict& want);
// The model's tensors ("model.<name>") of titan checkpoint `step_dir`, by our names.
nn::StateDict titan_checkpoint_weights(const std::filesystem::path& step_dir);
// Hugging Face folder `exported` (one model.safetensors) holds exactly `original`'s tensors, bit
// for bit, and every config.json key it writes has `original`'s value.
void expect_same_hf_folder(const std::filesystem::path& exported, const std::filesystem::path& original);

// The float32 GEMMs (BLAS sgemm calls) `run` issues on any thread, from a trace.
struct TracedGemms {
  int64_t calls = 0, flops = 0;
};
TracedGemms traced_sgemms(const std::function<void()>& run);

// Whether the tests run in CI (the environment variable CI is "true" or "1").
bool in_ci();

}  // namespace titan::test

// A reference the test needs is absent (a tokenizer file, a Python package). Locally the test is
// skipped with the reason; in CI (CI=true) a skip would hide the gap, so it fails with the reason.
#define TITAN_MISSING_REFERENCE(reason)                                                    \
  do {                                                                                     \
    if (::titan::test::in_ci()) GTEST_FAIL() << "missing reference (CI=true): " << reason; \
    GTEST_SKIP() << reason;                                                                \
  } while (0)

// bf16 products run on AMX-BF16 or AVX512-BF16; on a CPU with neither titan refuses them
// (CliGuards.Bf16TrainingIsRefusedWithoutBf16Instructions tests that), so a test of their numbers
// has nothing to run there.
#define TITAN_SKIP_WITHOUT_BF16()                                                                  \
  do {                                                                                             \
    if (::titan::kernels::cpu::onednn_bf16_isa().empty())                                          \
      GTEST_SKIP() << "this CPU has neither AMX-BF16 nor AVX512-BF16: titan refuses bf16 products"; \
  } while (0)

// Runs `stmt`, expects a titan::Error whose message contains every string in the list.
#define EXPECT_TITAN_ERROR(stmt, ...)                                                              \
  do {                                                                                             \
    bool thrown = false;                                                                           \
    try {                                                                                          \
      stmt;                                                                                        \
    } catch (const ::titan::Error& e) {                                                            \
      thrown = true;                                                                               \
      std::string msg = e.what();                                                                  \
      for (const std::string& part : std::vector<std::string>{__VA_ARGS__})                        \
        EXPECT_NE(msg.find(part), std::string::npos) << "message lacks '" << part << "': " << msg; \
    }                                                                                              \
    EXPECT_TRUE(thrown) << "expected a titan::Error from " #stmt;                                  \
  } while (0)
