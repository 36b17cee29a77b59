// [profiling] under data parallelism: every rank writes the trace of a traced step to a file of
// its own, with its rank as the trace's process and its collectives' sizes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "titan/dist/process_group.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

using namespace testing;

TEST(Profiling, EveryRankWritesItsOwnTraceWithItsCollectives) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size(), rank = world.rank();
  JobConfig cfg = small_config({local_batch(n), "--training.steps=2", "--profiling.enable_profiling=true",
                                "--profiling.profile_freq=2"});
  const fs::path traces = fs::path(cfg.job.dump_folder) / cfg.profiling.save_traces_folder;
  fs::remove_all(traces);
  std::ostringstream log;
  Trainer(cfg, log, world).train();

  const fs::path path = traces / "iteration_2" / ("rank" + std::to_string(rank) + "_trace.json");
  ASSERT_TRUE(fs::exists(path)) << path;
  EXPECT_FALSE(fs::exists(traces / "iteration_1"));
  if (rank == 0)
    EXPECT_NE(log.str().find("trace of step 2 written to " + path.string()), std::string::npos) << log.str();
  else
    EXPECT_EQ(log.str(), "") << "only rank 0 logs";

  std::ifstream file(path);
  const nlohmann::json trace = nlohmann::json::parse(file);
  int collectives = 0, sized = 0;
  std::string process_name;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), rank);
    if (e.at("ph") == "M" && e.at("name") == "process_name") process_name = e.at("args").at("name");
    if (e.at("ph") != "X" || e.at("cat") != "collective") continue;
    ++collectives;
    if (e.at("args").at("bytes").get<int64_t>() > 0) ++sized;
  }
  EXPECT_EQ(process_name, "rank " + std::to_string(rank));
  // One rank's step needs no communication; more ranks' gather, reduce and average.
  if (n > 1) {
    EXPECT_GT(collectives, 0);
    EXPECT_GT(sized, 0);
  }
}

}  // namespace
}  // namespace titan::train
