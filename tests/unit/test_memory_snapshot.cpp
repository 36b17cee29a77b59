#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_util.h"
#include "titan/core/allocator.h"
#include "titan/core/memory_snapshot.h"
#include "titan/models/registry.h"
#include "titan/ops/loss.h"
#include "titan/optim/adamw.h"
#include "titan/train/metrics/memory_snapshot.h"
#include "titan/train/trainer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Records for the scope of a test, whatever it throws.
struct Recording {
  explicit Recording(size_t max_points = 4096) { CpuAllocator::instance().start_recording(max_points); }
  ~Recording() { CpuAllocator::instance().stop_recording(); }
};

int64_t rounded(int64_t nbytes) { return static_cast<int64_t>(CpuAllocator::round_size(static_cast<size_t>(nbytes))); }

const OwnerBytes* find_owner(const std::vector<OwnerBytes>& owners, MemoryCategory c, const std::string& owner) {
  for (const OwnerBytes& o : owners)
    if (o.category == c && o.owner == owner) return &o;
  return nullptr;
}

int64_t sum_bytes(const std::vector<OwnerBytes>& owners) {
  int64_t n = 0;
  for (const OwnerBytes& o : owners) n += o.bytes;
  return n;
}

int64_t sum_category(const std::vector<OwnerBytes>& owners, MemoryCategory c, bool requested) {
  int64_t n = 0;
  for (const OwnerBytes& o : owners)
    if (o.category == c) n += requested ? o.requested_bytes : o.bytes;
  return n;
}

void expect_totals_are_the_allocators(const MemorySnapshot& s) {
  const MemoryStats now = CpuAllocator::instance().stats();
  EXPECT_EQ(s.totals.allocated_bytes, now.allocated_bytes);
  EXPECT_EQ(s.totals.peak_allocated_bytes, now.peak_allocated_bytes);
  EXPECT_EQ(s.totals.reserved_bytes, now.reserved_bytes);
  EXPECT_EQ(s.totals.num_allocs, now.num_allocs);
}

TEST(MemorySnapshot, RecordingOffRecordsNothing) {
  CpuAllocator& a = CpuAllocator::instance();
  ASSERT_FALSE(a.recording());
  Tensor kept;
  {
    MemoryOwnerScope owner(MemoryCategory::parameters);
    kept = Tensor::zeros({1000});
    Tensor gone = Tensor::zeros({3000});
  }
  MemorySnapshot s = a.memory_snapshot();
  EXPECT_FALSE(s.recording);
  EXPECT_EQ(s.events, 0u);
  EXPECT_TRUE(s.by_owner.empty());
  EXPECT_TRUE(s.largest.empty());
  EXPECT_TRUE(s.timeline.empty());
  expect_totals_are_the_allocators(s);

  // What was allocated while off has no owner: it is untracked, and stays so when freed later.
  Recording on;
  s = a.memory_snapshot();
  EXPECT_EQ(s.by_category[static_cast<size_t>(MemoryCategory::untracked)], s.totals.allocated_bytes);
  EXPECT_EQ(s.by_category[static_cast<size_t>(MemoryCategory::parameters)], 0);
  const int64_t before = s.totals.allocated_bytes;
  kept = Tensor();
  s = a.memory_snapshot();
  EXPECT_EQ(s.by_category[static_cast<size_t>(MemoryCategory::untracked)], before - rounded(4000));
  EXPECT_EQ(sum_bytes(s.by_owner), s.totals.allocated_bytes);
}

TEST(MemorySnapshot, OwnerScopesNestAndAttributeBytes) {
  Recording on;
  CpuAllocator& a = CpuAllocator::instance();
  const int64_t base = a.stats().allocated_bytes;
  Tensor p1, act, p2, loose, moved;
  {
    MemoryOwnerScope params(MemoryCategory::parameters);
    p1 = Tensor::zeros({1000});  // 4000 bytes
    {
      MemoryOwnerScope layer(MemoryCategory::activations, intern_memory_owner_name("layers.7.attention"));
      act = Tensor::zeros({5000});
      EXPECT_EQ(current_memory_owner().category, MemoryCategory::activations);
    }
    EXPECT_EQ(current_memory_owner().category, MemoryCategory::parameters);
    p2 = Tensor::zeros({10});
  }
  EXPECT_EQ(current_memory_owner().category, MemoryCategory::other);
  loose = Tensor::zeros({7});
  {
    MemoryOwnerScope ws(MemoryCategory::workspace);
    moved = Tensor::zeros({2048});
  }
  a.set_owner(moved.storage()->data(), {MemoryCategory::gradients, 0});

  MemorySnapshot s = a.memory_snapshot();
  const OwnerBytes* params = find_owner(s.by_owner, MemoryCategory::parameters, "");
  ASSERT_NE(params, nullptr);
  EXPECT_EQ(params->bytes, rounded(4000) + rounded(40));
  EXPECT_EQ(params->requested_bytes, 4040);
  EXPECT_EQ(params->count, 2);
  // Activations are reported by layer; the largest blocks keep the full module path.
  const OwnerBytes* layer = find_owner(s.by_owner, MemoryCategory::activations, "layers.7");
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->bytes, rounded(20000));
  EXPECT_EQ(s.largest.front().owner, "layers.7.attention");
  EXPECT_EQ(s.largest.front().bytes, rounded(20000));
  EXPECT_EQ(sum_category(s.by_owner, MemoryCategory::gradients, true), 8192);
  EXPECT_EQ(sum_category(s.by_owner, MemoryCategory::workspace, false), 0);
  EXPECT_EQ(sum_category(s.by_owner, MemoryCategory::other, true), 28);
  EXPECT_EQ(s.totals.allocated_bytes - base, rounded(4000) + rounded(40) + rounded(20000) + rounded(28) + 8192);
  EXPECT_EQ(sum_bytes(s.by_owner), s.totals.allocated_bytes);

  act = Tensor();
  s = a.memory_snapshot();
  EXPECT_EQ(find_owner(s.by_owner, MemoryCategory::activations, "layers.7"), nullptr);
  EXPECT_EQ(s.timeline.back().total(), s.totals.allocated_bytes);
  EXPECT_EQ(s.timeline.back().bytes[static_cast<size_t>(MemoryCategory::activations)], 0);
  // The peak was with the activations live.
  EXPECT_EQ(s.peak.by_category[static_cast<size_t>(MemoryCategory::activations)], rounded(20000));
  EXPECT_NE(find_owner(s.peak.by_owner, MemoryCategory::activations, "layers.7"), nullptr);
}

TEST(MemorySnapshot, LayerOfAModulePath) {
  EXPECT_EQ(memory_layer_of("layers.3.attention.wq"), "layers.3");
  EXPECT_EQ(memory_layer_of("layers.12"), "layers.12");
  EXPECT_EQ(memory_layer_of("output"), "output");
  EXPECT_EQ(memory_layer_of("encoder.norm"), "encoder");
  EXPECT_EQ(memory_layer_of(""), "");
}

TEST(MemorySnapshot, TimelineStaysBoundedAndKeepsThePeak) {
  Recording on(16);
  CpuAllocator& a = CpuAllocator::instance();
  a.reset_peak();
  std::vector<Tensor> live;
  for (int i = 0; i < 100; ++i) live.push_back(Tensor::zeros({1024}));
  const int64_t top = a.stats().allocated_bytes;
  while (!live.empty()) live.pop_back();
  for (int i = 0; i < 100; ++i) Tensor::zeros({16});
  MemorySnapshot s = a.memory_snapshot();
  EXPECT_LE(s.timeline.size(), 18u);  // 16 kept, the window in progress, the present
  EXPECT_GT(s.stride, 1u);
  int64_t highest = 0;
  for (const TimelinePoint& p : s.timeline) highest = std::max(highest, p.total());
  EXPECT_EQ(highest, top);
  EXPECT_EQ(s.peak.allocated_bytes, top);
  EXPECT_EQ(s.totals.peak_allocated_bytes, top);
  for (size_t i = 1; i < s.timeline.size(); ++i) EXPECT_LT(s.timeline[i - 1].event, s.timeline[i].event);
}

// A real step of a small Llama 3: the model built in a parameters scope (as the trainer does),
// forward through the modules, backward, AdamW.
TEST(MemorySnapshot, TotalsAndOwnersAfterForwardBackward) {
  Recording on;
  CpuAllocator& a = CpuAllocator::instance();
  a.reset_peak();
  Generator gen(1);
  const models::TrainSpec& spec = models::get_train_spec("llama3");
  std::shared_ptr<models::CausalLM> model;
  {
    MemoryOwnerScope owner(MemoryCategory::parameters);
    model = spec.build({.name = "llama3", .flavor = "debugmodel", .vocab_size = 256}, 32, gen);
  }
  for (auto& [name, m] : model->named_modules()) EXPECT_EQ(m->path(), name);
  std::vector<std::pair<std::string, Tensor>> named = model->named_parameters();
  optim::AdamW opt(named, {.lr = 1e-3});
  Tensor tokens = Tensor::zeros({2, 32}, {.dtype = kI64});
  Tensor loss = ops::cross_entropy((*model)(tokens), Tensor::zeros({2, 32}, {.dtype = kI64}));
  // Between forward and backward the activations autograd saved are live, by layer.
  MemorySnapshot forward = a.memory_snapshot();
  for (const char* layer : {"tok_embeddings", "layers.0", "layers.1", "norm", "output"})
    EXPECT_NE(find_owner(forward.by_owner, MemoryCategory::activations, layer), nullptr) << layer;
  EXPECT_EQ(sum_bytes(forward.by_owner), forward.totals.allocated_bytes);
  loss.backward();
  opt.step(1.0);

  MemorySnapshot s = a.memory_snapshot();
  expect_totals_are_the_allocators(s);
  EXPECT_EQ(sum_bytes(s.by_owner), s.totals.allocated_bytes);
  int64_t by_category = 0;
  for (int64_t b : s.by_category) by_category += b;
  EXPECT_EQ(by_category, s.totals.allocated_bytes);
  EXPECT_EQ(s.timeline.back().total(), s.totals.allocated_bytes);

  const int64_t n = model->num_parameters();
  int64_t param_blocks = 0;
  for (const auto& [name, p] : named) param_blocks += rounded(p.numel() * 4);
  EXPECT_EQ(sum_category(s.by_owner, MemoryCategory::parameters, true), n * 4);
  EXPECT_EQ(sum_category(s.by_owner, MemoryCategory::parameters, false), param_blocks);
  EXPECT_EQ(sum_category(s.by_owner, MemoryCategory::gradients, true), n * 4);
  EXPECT_EQ(sum_category(s.by_owner, MemoryCategory::optimizer_state, true), 2 * n * 4);

  EXPECT_EQ(s.peak.allocated_bytes, s.totals.peak_allocated_bytes);
  EXPECT_EQ(sum_bytes(s.peak.by_owner), s.peak.allocated_bytes);
  int64_t highest = 0;
  for (const TimelinePoint& p : s.timeline) highest = std::max(highest, p.total());
  EXPECT_EQ(highest, s.peak.allocated_bytes);
}

TEST(Allocator, OutOfMemoryIsAClearTitanError) {
  const size_t absurd = size_t{1} << 52;
  EXPECT_TITAN_ERROR(CpuAllocator::instance().allocate(absurd), "out of memory", "4503599627370496 bytes",
                     "allocated", "reserved");
  Recording on;
  try {
    MemoryOwnerScope owner(MemoryCategory::activations, intern_memory_owner_name("layers.0"));
    Tensor held = Tensor::zeros({4096});
    Tensor::empty({static_cast<int64_t>(absurd / 4)});
    FAIL() << "no error";
  } catch (const OutOfMemoryError& e) {
    // Taken at the failure, before unwinding freed `held`.
    ASSERT_NE(e.snapshot(), nullptr);
    const OwnerBytes* held = find_owner(e.snapshot()->by_owner, MemoryCategory::activations, "layers.0");
    ASSERT_NE(held, nullptr);
    EXPECT_EQ(held->bytes, rounded(4096 * 4));
  }
}

TEST(MemorySnapshot, JsonFileIsWholeAndNamesItsParts) {
  Recording on;
  Tensor t;
  {
    MemoryOwnerScope owner(MemoryCategory::optimizer_state);
    t = Tensor::zeros({256});
  }
  MemorySnapshot s = CpuAllocator::instance().memory_snapshot();
  s.reason = "step";
  s.step = 3;
  const fs::path dir = test::fresh_temp_dir("memory_snapshot_json");
  const fs::path path = dir / "a" / "b" / "snap.json";
  write_memory_snapshot(s, path);
  EXPECT_EQ(std::distance(fs::directory_iterator(path.parent_path()), fs::directory_iterator()), 1);
  json j = json::parse(test::slurp(path));
  EXPECT_EQ(j["step"], 3);
  EXPECT_EQ(j["totals"]["allocated_bytes"], s.totals.allocated_bytes);
  EXPECT_EQ(j["by_category"]["optimizer_state"], 1024);
  EXPECT_EQ(j["timeline"]["event"].size(), s.timeline.size());
  EXPECT_EQ(j["timeline"]["bytes"]["optimizer_state"].size(), s.timeline.size());
  EXPECT_EQ(j["peak"]["allocated_bytes"], s.peak.allocated_bytes);
}

// ---- the trainer's part --------------------------------------------------------------------------

train::JobConfig snapshot_config(const fs::path& dir, const std::vector<std::string>& more = {}) {
  const fs::path text = dir / "corpus.txt";
  std::ofstream(text) << std::string(4000, 'a') << "\n";
  std::vector<std::string> o = {"--training.dataset_path=" + text.string(),
                                "--model.tokenizer_path=",
                                "--model.vocab_size=512",
                                "--training.seq_len=32",
                                "--training.local_batch_size=2",
                                "--training.steps=4",
                                "--lr_scheduler.warmup_steps=1",
                                "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false",
                                "--metrics.peak_flops=1e11",
                                "--checkpoint.enable=false",
                                "--job.dump_folder=" + (dir / "out").string(),
                                "--profiling.enable_memory_snapshot=true",
                                "--profiling.profile_freq=2"};
  o.insert(o.end(), more.begin(), more.end());
  return train::load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml", o);
}

TEST(MemorySnapshotTrainer, WritesTheSnapshotEveryProfileFreqSteps) {
  const fs::path dir = test::fresh_temp_dir("memory_snapshot_trainer");
  std::ostringstream log;
  {
    train::Trainer t(snapshot_config(dir), log);
    t.train();
  }
  EXPECT_FALSE(CpuAllocator::instance().recording());
  const fs::path folder = dir / "out" / "memory_snapshot";
  EXPECT_FALSE(fs::exists(folder / "iteration_1"));
  EXPECT_FALSE(fs::exists(folder / "iteration_3"));
  ASSERT_TRUE(fs::exists(folder / "iteration_4" / "rank0_memory_snapshot.json"));
  const fs::path path = folder / "iteration_2" / "rank0_memory_snapshot.json";
  ASSERT_TRUE(fs::exists(path)) << log.str();
  json j = json::parse(test::slurp(path));
  EXPECT_EQ(j["reason"], "step");
  EXPECT_EQ(j["step"], 2);
  int64_t owners = 0, params = 0, moments = 0;
  for (const json& o : j["by_owner"]) {
    owners += o["bytes"].get<int64_t>();
    if (o["category"] == "parameters") params += o["requested_bytes"].get<int64_t>();
    if (o["category"] == "optimizer_state") moments += o["requested_bytes"].get<int64_t>();
  }
  EXPECT_EQ(owners, j["totals"]["allocated_bytes"].get<int64_t>());
  EXPECT_GT(params, 0);
  EXPECT_EQ(moments, 2 * params);  // AdamW's two moments per parameter, no FSDP
  int64_t at_peak = 0;
  for (const json& o : j["peak"]["by_owner"]) at_peak += o["bytes"].get<int64_t>();
  EXPECT_EQ(at_peak, j["peak"]["allocated_bytes"].get<int64_t>());
  EXPECT_EQ(j["peak"]["allocated_bytes"], j["totals"]["peak_allocated_bytes"]);
  // Each step's forward made activations, which its backward freed: none are left after it.
  const json& activations = j["timeline"]["bytes"]["activations"];
  EXPECT_GT(*std::max_element(activations.begin(), activations.end()), 0);
  EXPECT_EQ(activations.back(), 0);
  EXPECT_EQ(j["by_category"]["activations"], 0);
}

TEST(MemorySnapshotTrainer, OutOfMemoryInAStepWritesTheSnapshotAndRethrows) {
  const fs::path dir = test::fresh_temp_dir("memory_snapshot_oom");
  std::ostringstream log;
  train::MemorySnapshots snapshots(snapshot_config(dir), 0, log);
  EXPECT_THROW(snapshots.run_step(7,
                                  [] {
                                    Tensor held = Tensor::zeros({64});
                                    return Tensor::empty({int64_t{1} << 50});
                                  }),
               OutOfMemoryError);
  const fs::path path = dir / "out" / "memory_snapshot" / "oom" / "rank0_memory_snapshot.json";
  ASSERT_EQ(snapshots.oom_path(), path);
  ASSERT_TRUE(fs::exists(path));
  EXPECT_NE(log.str().find(path.string()), std::string::npos) << log.str();
  json j = json::parse(test::slurp(path));
  EXPECT_EQ(j["reason"], "oom");
  EXPECT_EQ(j["step"], 7);
}

TEST(MemorySnapshotTrainer, MemvizDrawsTheSnapshot) {
  const fs::path dir = test::fresh_temp_dir("memory_snapshot_memviz");
  std::ostringstream log;
  {
    train::Trainer t(snapshot_config(dir, {"--training.steps=2"}), log);
    t.train();
  }
  const fs::path snap = dir / "out" / "memory_snapshot" / "iteration_2" / "rank0_memory_snapshot.json";
  ASSERT_TRUE(fs::exists(snap));
  const std::string python = fs::exists(TITAN_PYTHON) ? TITAN_PYTHON : "python3";
  const fs::path html = dir / "snap.html";
  const std::string cmd = python + " " + std::string(TITAN_SOURCE_DIR) + "/scripts/memviz.py '" + snap.string() +
                          "' -o '" + html.string() + "' > '" + (dir / "memviz.log").string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::slurp(dir / "memviz.log");
  const std::string page = test::slurp(html);
  EXPECT_NE(page.find("<svg"), std::string::npos);
  for (const char* c : {"parameters", "gradients", "optimizer_state", "activations", "peak"})
    EXPECT_NE(page.find(c), std::string::npos) << c;
}

}  // namespace
}  // namespace titan
