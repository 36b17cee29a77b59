#include "support/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>

#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/trace.h"

namespace titan::test {

double max_rel_error(const Tensor& a, const Tensor& ref, double floor) {
  std::vector<double> x = a.to_vector<double>(), y = ref.to_vector<double>();
  double scale = floor, err = 0;
  for (double v : y) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::abs(x[i] - y[i]);
    if (std::isnan(x[i]) != std::isnan(y[i])) d = INFINITY;
    err = std::max(err, d);
  }
  return err / scale;
}

::testing::AssertionResult tensors_close(const Tensor& a, const Tensor& ref, double tol,
                                         const std::string& what) {
  if (a.sizes() != ref.sizes())
    return ::testing::AssertionFailure()
           << what << ": shape " << shape_str(a.sizes()) << " vs reference " << shape_str(ref.sizes());
  double e = max_rel_error(a, ref);
  if (e <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative error " << e << " > " << tol;
}

Tensor rand_f64(const Shape& s, uint64_t seed, bool requires_grad, double lo, double hi) {
  Generator g(seed);
  Tensor t = Tensor::rand(s, g, {.dtype = kF64}, lo, hi);
  if (requires_grad) t.requires_grad_();
  return t;
}

Tensor rand_f32(const Shape& s, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  return Tensor::rand(s, g, {.dtype = kF32}, lo, hi);
}

namespace {

// The folder under which a test process's temp_dir folders live: removed when every test of the
// process has passed (the graph-mode resume tests alone write 700 MB a run, which runs of the
// suite used to leave behind), kept when one failed, for a look at what it wrote.
const std::filesystem::path& process_temp_root() {
  static const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("titan_tests_" + std::to_string(::getpid()));
  return root;
}

class RemoveTempRootIfAllPassed : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Passed()) return;
    std::error_code ignored;  // a folder a test never made
    std::filesystem::remove_all(process_temp_root(), ignored);
  }
};

[[maybe_unused]] ::testing::Environment* const remove_temp_root =
    ::testing::AddGlobalTestEnvironment(new RemoveTempRootIfAllPassed);

}  // namespace

std::filesystem::path temp_dir(const std::string& name) {
  std::string clean = name;
  for (char& c : clean)
    if (c == '/') c = '_';
  std::filesystem::path dir = process_temp_root() / clean;
  std::filesystem::create_directories(dir);
  return dir;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

CliRun run_titan(const std::vector<std::string>& args, const std::filesystem::path& dir,
                 const std::string& stdin_text) {
  const std::filesystem::path in = dir / "stdin", out = dir / "stdout", err = dir / "stderr";
  std::ofstream(in, std::ios::binary | std::ios::trunc) << stdin_text;
  std::string cmd = "cd '" + std::string(TITAN_SOURCE_DIR) + "' && " + TITAN_CLI;
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " <" + in.string() + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

std::filesystem::path fresh_temp_dir(const std::string& name) {
  std::filesystem::path dir = temp_dir(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ac = a.detach().contiguous(), bc = b.detach().contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

void expect_same_state(const nn::StateDict& got, const nn::StateDict& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    EXPECT_TRUE(same_bits(it->second, t)) << name << ": " << it->second.desc() << " vs " << t.desc();
  }
}

nn::StateDict titan_checkpoint_weights(const std::filesystem::path& step_dir) {
  checkpoint::Reader reader(step_dir);
  checkpoint::Pieces targets;
  for (const auto& [name, t] : reader.metadata().tensors)
    if (name.starts_with("model."))
      targets.emplace(name, checkpoint::whole(Tensor::empty(t.shape, {.dtype = t.dtype})));
  reader.load(targets, {.scope = "model."});
  nn::StateDict out;
  for (const auto& [name, p] : targets) out.emplace(name.substr(6), p.data);
  return out;
}

void expect_same_hf_folder(const std::filesystem::path& exported, const std::filesystem::path& original) {
  checkpoint::SafetensorsFile theirs =
      checkpoint::read_safetensors((original / "model.safetensors").string());
  checkpoint::SafetensorsFile ours = checkpoint::read_safetensors((exported / "model.safetensors").string());
  ASSERT_EQ(ours.tensors.size(), theirs.tensors.size());
  for (const auto& [name, t] : theirs.tensors) {
    ASSERT_TRUE(ours.tensors.count(name)) << "titan's export lacks " << name;
    EXPECT_TRUE(same_bits(ours.tensors.at(name), t)) << name;
  }
  const nlohmann::json mine = checkpoint::HfReader(exported).config(),
                       ref = checkpoint::HfReader(original).config();
  for (const auto& [key, value] : mine.items()) EXPECT_EQ(value, ref.value(key, nlohmann::json())) << key;
}

TracedGemms traced_sgemms(const std::function<void()>& run) {
  trace::start();
  run();
  trace::stop();
  TracedGemms g;
  const nlohmann::json events = nlohmann::json::parse(trace::to_json(0, "test")).at("traceEvents");
  for (const nlohmann::json& e : events)
    if (e.value("ph", "") == "X" && e.value("name", "") == "sgemm") {
      ++g.calls;
      g.flops += e.at("args").at("flops").get<int64_t>();
    }
  return g;
}

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && (std::string_view(ci) == "true" || std::string_view(ci) == "1");
}

}  // namespace titan::test
