// metrics.save_for_all_ranks: every rank writes its own metrics beside rank 0's; without it only
// rank 0 writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "titan/dist/process_group.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

using namespace testing;

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(MetricsAllRanks, EveryRankWritesItsOwnMetricsOnlyWhenAsked) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size(), rank = world.rank();
  for (bool all : {false, true}) {
    SCOPED_TRACE(all ? "save_for_all_ranks" : "rank 0 only");
    JobConfig cfg = small_config({local_batch(n), "--training.steps=2", "--metrics.log_freq=1",
                                  "--metrics.enable_jsonl=true", "--metrics.enable_tensorboard=true",
                                  "--metrics.save_for_all_ranks=" + std::string(all ? "true" : "false")});
    const fs::path dump = cfg.job.dump_folder;
    fs::remove_all(dump);  // this rank's own
    std::ostringstream log;
    const TrainResult r = Trainer(cfg, log, world).train();
    const fs::path mine =
        dump / (rank == 0 ? "metrics.jsonl" : "metrics_rank" + std::to_string(rank) + ".jsonl");
    const fs::path tb = dump / (rank == 0 ? std::string("tb") : "tb/rank_" + std::to_string(rank));
    if (rank != 0 && !all) {
      EXPECT_FALSE(fs::exists(mine)) << mine;
      EXPECT_FALSE(fs::exists(tb)) << tb;
      continue;
    }
    ASSERT_TRUE(fs::exists(mine)) << mine;
    EXPECT_TRUE(fs::is_directory(tb)) << tb;
    const auto records = read_jsonl(mine);
    ASSERT_EQ(records.size(), 2u);
    // The loss is the global batch's, the same on every rank; the throughput is this rank's.
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ(records[i].at("step"), static_cast<int64_t>(i + 1));
      EXPECT_DOUBLE_EQ(records[i].at("loss").get<double>(), r.losses[i]);
      EXPECT_GT(records[i].at("tps").get<double>(), 0);
    }
  }
}

}  // namespace
}  // namespace titan::train
