// The key-value store PJRT clients that span processes exchange their topology through
// (dist/tcp_store.h), served and used within one process here (tests/dist runs it across ranks),
// and the PJRT callbacks over it, driven by a plugin that joins processes the way XLA's CUDA
// plugin does (support/joining_pjrt_plugin.cpp).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/paths.h"
#include "support/test_util.h"
#include "titan/dist/tcp_store.h"
#include "titan/graph/pjrt/client.h"

namespace titan::dist {
namespace {

using namespace std::chrono_literals;

struct Served {
  std::shared_ptr<TcpStoreServer> server = std::make_shared<TcpStoreServer>();
  TcpStore client() const { return TcpStore("127.0.0.1", server->port(), server); }
};

TEST(TcpStore, PutThenGetTryGetAndReplace) {
  Served s;
  TcpStore a = s.client(), b = s.client();
  EXPECT_FALSE(b.try_get("k").has_value());
  a.put("k", "one");
  EXPECT_EQ(b.get("k", 1000ms), "one");
  EXPECT_EQ(b.try_get("k").value(), "one");
  a.put("k", "two");
  EXPECT_EQ(b.get("k", 1000ms), "two");
  a.put("empty", "");
  EXPECT_EQ(b.get("empty", 1000ms), "");
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  a.put("big", big);
  EXPECT_EQ(b.get("big", 5000ms), big);
}

TEST(TcpStore, GetWaitsForAPutFromAnotherThreadAndTimesOutNamingTheKey) {
  Served s;
  TcpStore store = s.client();
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    s.client().put("late", "here");
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(store.get("late", 10000ms), "here");
  later.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the waiting get was not answered when the key arrived";
  const auto before = std::chrono::steady_clock::now();
  EXPECT_TITAN_ERROR(store.get("never", 300ms), "no process put key \"never\" within 300 ms");
  const auto waited = std::chrono::steady_clock::now() - before;
  EXPECT_GE(waited, 290ms);
  EXPECT_LT(waited, 5s);
}

TEST(TcpStore, ManyThreadsPutAndGetEachOthersKeys) {
  Served s;
  constexpr int kThreads = 8, kKeys = 40;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      TcpStore store = s.client();
      for (int k = 0; k < kKeys; ++k) store.put(std::to_string(t) + "/" + std::to_string(k), std::to_string(t * k));
      // Each reads the next thread's keys, which may not be there yet: the gets wait.
      const int other = (t + 1) % kThreads;
      for (int k = 0; k < kKeys; ++k)
        if (store.get(std::to_string(other) + "/" + std::to_string(k), 20000ms) != std::to_string(other * k)) ++wrong;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(TcpStore, AMalformedRequestLeavesTheServerServing) {
  Served s;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(s.server->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const char garbage[] = "Xgarbage that is no request";
  ASSERT_GT(::send(fd, garbage, sizeof garbage, 0), 0);
  char reply = 0;
  EXPECT_EQ(::recv(fd, &reply, 1, 0), 0) << "the server should close a connection it cannot read";
  ::close(fd);
  TcpStore store = s.client();
  store.put("after", "fine");
  EXPECT_EQ(store.get("after", 1000ms), "fine");
}

TEST(TcpStore, AStoreNobodyServesIsAnErrorNamingIt) {
  int port = 0;
  {
    TcpStoreServer gone;
    port = gone.port();
  }
  TcpStore store("127.0.0.1", port);
  EXPECT_FALSE(store.reachable(500ms));
  EXPECT_TITAN_ERROR(store.put("k", "v"), "could not reach the store at 127.0.0.1:" + std::to_string(port));
}

// A server destroyed while a client still reads it (rank 0 leaving first) serves on until that
// client says it is done.
TEST(TcpStore, AServerLastsUntilEveryClientIsDone) {
  auto server = std::make_shared<TcpStoreServer>(1);
  TcpStore client("127.0.0.1", server->port());
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    server.reset();
    stopped = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(stopped.load());
  client.put("k", "v");
  EXPECT_EQ(client.get("k", 1000ms), "v");
  client.done();
  stopper.join();
  EXPECT_FALSE(client.reachable(500ms));
}

// PJRT's callbacks over the store, as a plugin that spans processes calls them: node 0 of 2 here,
// with node 1's entry put by the test, so the client counts both nodes' devices.
TEST(TcpStore, APluginThatJoinsProcessesExchangesThroughTheCallbacks) {
  Served s;
  auto store = std::make_shared<TcpStore>(s.client());
  const graph::pjrt::Plugin& plugin = graph::pjrt::Plugin::load(test::paths::joining_pjrt_plugin());
  s.client().put("pjrt/devices/1", "3");
  const graph::pjrt::Client client = graph::pjrt::Client::create(
      plugin, {{"node_id", int64_t{0}}, {"num_nodes", int64_t{2}}, {"cpu_device_count", int64_t{2}}}, store);
  EXPECT_EQ(client.device_count(), 5) << "node 1's 3 devices did not arrive through the store";
  EXPECT_EQ(s.client().get("pjrt/devices/0", 1000ms), "2") << "node 0's put did not reach the store";
  for (int i = 0; i < client.device_count(); ++i) EXPECT_EQ(client.device_id(i), i);
  // A node that never puts: the plugin's get times out, and its error names the key.
  EXPECT_TITAN_ERROR(graph::pjrt::Client::create(plugin,
                                                 {{"node_id", int64_t{0}},
                                                  {"num_nodes", int64_t{3}},
                                                  {"kv_timeout_ms", int64_t{300}}},
                                                 store),
                     "no process put key \"pjrt/devices/2\" within 300 ms");
  EXPECT_TITAN_ERROR(graph::pjrt::Client::create(plugin, {{"num_nodes", int64_t{2}}}),
                     "num_nodes > 1 needs the caller's key-value callbacks");
}

// The stand-in joined (as node 1 of 2, node 0's entry put by the test): the client addresses its
// own 2 devices, ids 2 and 3 of the 4 it knows.
TEST(TcpStore, AJoinedClientAddressesItsOwnDevicesOfAll) {
  Served s;
  auto store = std::make_shared<TcpStore>(s.client());
  s.client().put("pjrt/devices/0", "2");
  const graph::pjrt::Client client =
      graph::pjrt::Client::create(graph::pjrt::Plugin::load(test::paths::joining_pjrt_plugin()),
                                  {{"node_id", int64_t{1}},
                                   {"num_nodes", int64_t{2}},
                                   {"cpu_device_count", int64_t{2}},
                                   {"joined", true}},
                                  store);
  EXPECT_EQ(client.device_count(), 2);
  EXPECT_EQ(client.global_device_count(), 4);
  EXPECT_EQ(client.process_index(), 1);
  for (int i = 0; i < client.device_count(); ++i) EXPECT_EQ(client.device_id(i), 2 + i);
}

}  // namespace
}  // namespace titan::dist
