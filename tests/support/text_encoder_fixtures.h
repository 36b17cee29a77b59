#pragma once
// The text encoders' transformers references (tests/parity/text_encoders_reference.py) under the
// build's parity folder, made by the first test that needs them and again whenever the script is
// newer than what it wrote; one process at a time (a folder lock), as ctest runs tests in parallel.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/paths.h"
#include "support/test_util.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/file_lock.h"

namespace titan::test {

inline std::filesystem::path text_encoders_script() {
  return std::filesystem::path(TITAN_SOURCE_DIR) / "tests" / "parity" / "text_encoders_reference.py";
}

// Runs the script's `args`; true when it exits 0.
inline bool run_text_encoders_script(const std::string& args) {
  const std::string cmd =
      std::string("'") + TITAN_PYTHON + "' '" + text_encoders_script().string() + "' " + args;
  return std::system(cmd.c_str()) == 0;
}

// The references' folder, made or refreshed first; empty (and a test failure) when the script
// fails (is transformers installed in the venv? run make deps-test).
inline std::filesystem::path text_encoder_fixtures() {
  namespace fs = std::filesystem;
  const fs::path parity = TITAN_PARITY_DIR, root = parity / "text_encoders";
  const auto fresh = [&] {
    const fs::path stamp = root / "buckets.safetensors";
    return fs::exists(stamp) && fs::last_write_time(stamp) >= fs::last_write_time(text_encoders_script());
  };
  if (fresh()) return root;
  fs::create_directories(parity);
  std::optional<FolderLock> lock;
  while (!(lock = FolderLock::try_lock(parity, "text_encoders.lock")))
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (!fresh() && !run_text_encoders_script("reference --out '" + root.string() + "'")) {
    ADD_FAILURE() << "text_encoders_reference.py failed (is transformers installed in " << TITAN_PYTHON
                  << "?)";
    return {};
  }
  return root;
}

// HF folder `src` (one model.safetensors) copied to fresh temp folder `name`, its config.json
// edited by `edit`.
inline std::filesystem::path edited_copy(const std::filesystem::path& src, const std::string& name,
                                         const std::function<void(nlohmann::json&)>& edit) {
  namespace fs = std::filesystem;
  const fs::path dir = fresh_temp_dir(name);
  fs::copy(src, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  nlohmann::json config = nlohmann::json::parse(slurp(dir / "config.json"));
  edit(config);
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

// The same with the tensors of model.safetensors edited instead.
inline std::filesystem::path with_tensors(const std::filesystem::path& src, const std::string& name,
                                          const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  const std::filesystem::path dir = edited_copy(src, name, [](nlohmann::json&) {});
  checkpoint::SafetensorsFile file = checkpoint::read_safetensors((dir / "model.safetensors").string());
  edit(file.tensors);
  checkpoint::write_safetensors((dir / "model.safetensors").string(), file.tensors, file.metadata);
  return dir;
}

// An encoder's forward_matmul_flops against the float32 GEMMs its forward over 2 x `seq` token
// ids issues: the count the encoders' benchmark measures its GEMM ceiling with.
template <typename Model>
void expect_forward_matmul_flops_counted(Model& model, int64_t vocab, int64_t seq) {
  const int64_t batch = 2;
  std::vector<int64_t> tokens(static_cast<size_t>(batch * seq));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i * 7) % vocab;
  const Tensor ids = Tensor::from_vector(tokens, {batch, seq});
  const autograd::NoGradGuard frozen;
  const TracedGemms gemms = traced_sgemms([&] { model.forward(ids); });
  EXPECT_GT(gemms.calls, 0);
  EXPECT_EQ(static_cast<double>(gemms.flops), static_cast<double>(batch) * model.args().forward_matmul_flops(seq));
}

}  // namespace titan::test
