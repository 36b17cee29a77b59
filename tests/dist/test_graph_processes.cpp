// What the CPU plugin does across processes, the fact graph mode's refusal of several processes
// rests on: each MPI rank creates a client with the plugin's `process_id` option, which numbers
// its devices apart, but the client knows only its own process's devices (PJRT_Client_Devices
// equals the addressable ones): the plugin joins no processes, and its collectives
// (InProcessCollectives) stay within one. Should a plugin version join them, this test fails and
// the refusal can give way to the multi-process path.
#include <gtest/gtest.h>

#include "titan/dist/process_group.h"
#include "titan/graph/runner.h"
#include "trainer_fixture.h"

namespace titan::train::testing {
namespace {

TEST(GraphProcesses, TheCpuPluginNumbersEachProcessButJoinsNone) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() == 1) GTEST_SKIP() << "one process has nothing to join";
  const graph::Runner runner({.plugin = "cpu",
                              .client_options = {{"cpu_device_count", int64_t{2}},
                                                 {"process_id", static_cast<int64_t>(world.rank())}}});
  const graph::pjrt::Client& client = runner.client();
  EXPECT_EQ(client.device_count(), 2);
  EXPECT_EQ(client.global_device_count(), 2) << "the plugin joined processes: graph mode could run across them";
  EXPECT_EQ(client.process_index(), world.rank());
  world.barrier().wait();
}

// And graph mode over several processes is refused before anything is built, saying why.
TEST(GraphProcesses, GraphModeOverSeveralProcessesIsRefused) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() == 1) GTEST_SKIP() << "one process";
  const std::string message = error_of([&] {
    std::ostringstream log;
    Trainer(small_config({"--compile.enable=true", "--compile.mode=graph"}), log, world);
  });
  EXPECT_NE(message.find("runs the captured step from one process"), std::string::npos) << message;
  EXPECT_NE(message.find("collectives within one process only"), std::string::npos) << message;
  world.barrier().wait();
}

}  // namespace
}  // namespace titan::train::testing
