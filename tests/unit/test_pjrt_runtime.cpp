// The PJRT runtime (graph/pjrt/): loading plugins and refusing the wrong ones, compiling
// StableHLO text, moving arrays to and from the device, running programs with donated buffers.
// Tests that are not about one plugin run on $TITAN_GRAPH_PLUGIN (default cpu), so that
// scripts/gpu_check.sh runs them on a GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>

#include "support/test_util.h"
#include "titan/graph/pjrt/client.h"
#include "titan/graph/runner.h"

namespace titan {
namespace {

using graph::pjrt::Buffer;
using graph::pjrt::Client;
using graph::pjrt::ClientOption;
using graph::pjrt::Executable;
using graph::pjrt::Plugin;

std::string plugin_under_test() {
  const char* env = std::getenv("TITAN_GRAPH_PLUGIN");
  return env && *env ? env : "cpu";
}

// The CPU plugin of API 0.81, beside the default one (0.115).
std::string second_cpu_plugin() {
  return Plugin::plugin_dir() + "/cpu-xla-cpu-pjrt/xla_cpu_pjrt.so";
}

// The tests share one client per plugin: creating one starts the plugin's thread pools. The CPU
// plugins get one device: their default is several, each with its own threads.
Client& client_of(const std::string& name) {
  static std::map<std::string, Client> clients;
  auto it = clients.find(name);
  if (it == clients.end()) {
    std::vector<ClientOption> options;
    if (name == "cpu" || name == second_cpu_plugin()) options.push_back({"cpu_device_count", int64_t{1}});
    const char* extra = std::getenv("TITAN_GRAPH_PLUGIN_OPTIONS");
    if (name == plugin_under_test() && extra && *extra) {
      const auto parsed =
          graph::parse_runtime_options(name, extra, "TITAN_GRAPH_PLUGIN_OPTIONS").client_options;
      options.insert(options.end(), parsed.begin(), parsed.end());
    }
    it = clients.emplace(name, Client::create(Plugin::load(name), options)).first;
  }
  return it->second;
}
Client& test_client() {
  return client_of(plugin_under_test());
}

template <typename T>
std::vector<T> host(const Buffer& b) {
  std::vector<T> out(static_cast<size_t>(numel_of(b.dims())));
  b.to_host(out.data());
  return out;
}

template <typename T>
Buffer device(const Client& c, const std::vector<T>& values, const Shape& dims) {
  return c.to_device(values.data(), dtype_of<T>::value, dims);
}

// add, dot_general and a reduce, returned as three results.
constexpr char kThreeResults[] = R"(
module @three_results {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %c: tensor<2x3xf32>)
      -> (tensor<2x3xf32>, tensor<2x2xf32>, tensor<f32>) {
    %sum = stablehlo.add %a, %c : tensor<2x3xf32>
    %prod = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]
        : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %total = stablehlo.reduce(%a init: %zero) applies stablehlo.add across dimensions = [0, 1]
        : (tensor<2x3xf32>, tensor<f32>) -> tensor<f32>
    return %sum, %prod, %total : tensor<2x3xf32>, tensor<2x2xf32>, tensor<f32>
  }
}
)";

struct ThreeResults {
  std::vector<float> a = {0.5f, -1.25f, 2.f, 3.5f, 0.75f, -0.125f};  // 2x3
  std::vector<float> b = {1.f, 2.f, -0.5f, 0.25f, 3.f, -1.f};        // 3x2
  std::vector<float> c = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};       // 2x3

  std::vector<float> sum() const {
    std::vector<float> r(6);
    for (int i = 0; i < 6; ++i) r[i] = a[i] + c[i];
    return r;
  }
  std::vector<float> product() const {
    std::vector<float> r(4, 0.f);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int k = 0; k < 3; ++k) r[i * 2 + j] += a[i * 3 + k] * b[k * 2 + j];
    return r;
  }
  float total() const {
    float t = 0;
    for (float v : a) t += v;
    return t;
  }
  // Runs the module on `client`; the three results as host vectors.
  std::vector<std::vector<float>> run(Client& client, double* compile_seconds = nullptr) const {
    Executable exe = client.compile(kThreeResults);
    if (compile_seconds) *compile_seconds = exe.compile_seconds();
    EXPECT_EQ(exe.num_outputs(), 3u);
    Buffer da = device(client, a, {2, 3}), db = device(client, b, {3, 2}), dc = device(client, c, {2, 3});
    std::vector<Buffer> out = exe.execute({&da, &db, &dc});
    EXPECT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].dims(), (Shape{2, 3}));
    EXPECT_EQ(out[1].dims(), (Shape{2, 2}));
    EXPECT_EQ(out[2].dims(), Shape{});
    for (const Buffer& o : out) EXPECT_EQ(o.dtype(), kF32);
    return {host<float>(out[0]), host<float>(out[1]), host<float>(out[2])};
  }
};

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << what << " [" << i << "]";
}

TEST(PjrtRuntime, PluginReportsVersionAndExtensions) {
  Plugin& plugin = Plugin::load(plugin_under_test());
  EXPECT_EQ(&plugin, &Plugin::load(plugin.path())) << "a plugin is loaded once per resolved path";
  EXPECT_EQ(plugin.api_version().rfind("0.", 0), 0u) << plugin.api_version();
  EXPECT_TRUE(plugin.has_ffi_extension());
  Client& client = test_client();
  EXPECT_GE(client.device_count(), 1);
  EXPECT_FALSE(client.device_description(0).empty());
  std::cout << "plugin " << plugin.path() << ": C API " << plugin.api_version() << ", platform "
            << client.platform_name() << ", " << client.device_count()
            << " device(s), device 0: " << client.device_description(0) << ", extensions:";
  for (int t : plugin.extension_types()) std::cout << " " << t;
  std::cout << "\n";
}

TEST(PjrtRuntime, CpuDeviceCountOptionIsHonoured) {
  Client two = Client::create(Plugin::load("cpu"), {{"cpu_device_count", int64_t{2}}});
  EXPECT_EQ(two.platform_name(), "cpu");
  EXPECT_EQ(two.device_count(), 2);
  EXPECT_TITAN_ERROR(two.device_description(2), "device 2 does not exist", "2 addressable devices");
}

TEST(PjrtRuntime, CompileOptionsForOneReplicaAndPartition) {
  const std::string one("\x1a\x04\x20\x01\x28\x01", 6);
  EXPECT_EQ(graph::pjrt::compile_options_proto({}), one);
  // An option is one env_option_overrides entry: {key (1): name, value (2): {bool_field (2)}}.
  EXPECT_EQ(graph::pjrt::compile_options_proto({.options = {{"xla_allow_excess_precision", false}}}),
            one + std::string("\x3a\x20\x0a\x1a", 4) + "xla_allow_excess_precision" +
                std::string("\x12\x02\x10\x00", 4));
  // A string's value is its string_field (1).
  EXPECT_EQ(graph::pjrt::compile_options_proto({.options = {{"xla_dump_to", std::string("/d")}}}),
            one + std::string("\x3a\x13\x0a\x0b", 4) + "xla_dump_to" + std::string("\x12\x04\x0a\x02", 4) + "/d");
  // An integer is int_field (3), a varint (512: 80 04; -1: ten bytes of two's complement).
  EXPECT_EQ(graph::pjrt::compile_options_proto({.options = {{"xla_a", int64_t{512}}}}),
            one + std::string("\x3a\x0c\x0a\x05", 4) + "xla_a" + std::string("\x12\x03\x18\x80\x04", 5));
  EXPECT_EQ(graph::pjrt::compile_options_proto({.options = {{"xla_a", int64_t{-1}}}}),
            one + std::string("\x3a\x14\x0a\x05", 4) + "xla_a" + std::string("\x12\x0b\x18", 3) +
                std::string(9, '\xff') + std::string("\x01", 1));
  // A double is double_field (4), eight little-endian bytes (0.5: 3fe0000000000000).
  EXPECT_EQ(graph::pjrt::compile_options_proto({.options = {{"xla_a", 0.5}}}),
            one + std::string("\x3a\x12\x0a\x05", 4) + "xla_a" + std::string("\x12\x09\x21", 3) +
                std::string(6, '\0') + std::string("\xe0\x3f", 2));
  // Values of 128 and over take two varint bytes, and the nested length follows.
  EXPECT_EQ(graph::pjrt::compile_options_proto({.num_replicas = 1, .num_partitions = 300}),
            std::string("\x1a\x05\x20\x01\x28\xac\x02", 7));
}

// XLA's options reach the compilation: ones it knows change nothing in the results; a name it does
// not know, or a value of the wrong type, is its error, not a silently ignored key.
TEST(PjrtRuntime, XlaOptionsReachTheCompilation) {
  const std::string module = R"(module @m {
  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.multiply %a, %a : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
})";
  graph::Runner tuned({.plugin = "cpu",
                       .client_options = {{"cpu_device_count", int64_t{1}}},
                       .xla_options = graph::parse_xla_options("xla_cpu_prefer_vector_width=512,xla_cpu_enable_fast_math=false",
                                                               "compile.xla_options")});
  const graph::Runner::Compiled c = tuned.compile(module);
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, -4}, {4});
  graph::pjrt::Buffer in = tuned.upload(x);
  std::vector<graph::pjrt::Buffer> out = c.executable->execute({&in});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(tuned.download(out[0]).to_vector<float>(), (std::vector<float>{1, 4, 9, 16}));
  graph::Runner unknown({.plugin = "cpu", .xla_options = {{"xla_no_such_option", true}}});
  EXPECT_TITAN_ERROR(unknown.compile(module), "No such compile option: 'xla_no_such_option'");
  graph::Runner mistyped({.plugin = "cpu", .xla_options = {{"xla_cpu_prefer_vector_width", true}}});
  EXPECT_TITAN_ERROR(mistyped.compile(module), "While setting option xla_cpu_prefer_vector_width",
                     "not a valid int32 value");
}

TEST(PjrtRuntime, ReadsMainParameters) {
  auto params = graph::pjrt::main_parameters(
      R"(func.func public @main(%arg0: tensor<4x3xbf16> {tf.aliasing_output = 1 : i32},
      %arg1: tensor<i64> loc("x"), %arg2: tensor<?x2xf32>, %arg3: tensor<2xi1> {mhlo.sharding = "{a, b}"}) -> ())");
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].type, "tensor<4x3xbf16>");
  EXPECT_EQ(params[0].dtype, kBF16);
  EXPECT_EQ(params[0].dims, (Shape{4, 3}));
  EXPECT_EQ(params[0].aliased_output, 1);
  EXPECT_EQ(params[1].dtype, kI64);
  EXPECT_EQ(params[1].dims, Shape{});
  EXPECT_EQ(params[1].aliased_output, -1);
  EXPECT_FALSE(params[2].dims.has_value());
  EXPECT_FALSE(params[3].dtype.has_value());
  EXPECT_TRUE(graph::pjrt::main_parameters("func.func @main() -> tensor<f32>").empty());
  EXPECT_TITAN_ERROR(graph::pjrt::main_parameters("func.func @f(%a: tensor<f32>)"),
                     "no `func.func public @main");
}

TEST(PjrtRuntime, AddDotReduceGiveSeveralResults) {
  ThreeResults m;
  auto out = m.run(test_client());
  expect_near(out[0], m.sum(), "add");
  expect_near(out[1], m.product(), "dot_general");
  expect_near(out[2], {m.total()}, "reduce");
}

TEST(PjrtRuntime, BothCpuPluginsGiveTheSameNumbers) {
  ThreeResults m;
  Client& a = client_of("cpu");
  Client& b = client_of(second_cpu_plugin());
  double seconds_a = 0, seconds_b = 0;
  auto out_a = m.run(a, &seconds_a);
  auto out_b = m.run(b, &seconds_b);
  EXPECT_NE(a.plugin().api_version(), b.plugin().api_version());
  for (size_t r = 0; r < out_a.size(); ++r) EXPECT_EQ(out_a[r], out_b[r]) << "result " << r;
  std::cout << "C API " << a.plugin().api_version() << " compiled in " << seconds_a << " s, C API "
            << b.plugin().api_version() << " in " << seconds_b << " s\n";
}

// w <- w - 0.5 g, updating w in place.
constexpr char kSgdStep[] = R"(
module @sgd_step {
  func.func public @main(%w: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %g: tensor<4xf32>) -> tensor<4xf32> {
    %lr = stablehlo.constant dense<0.5> : tensor<4xf32>
    %step = stablehlo.multiply %g, %lr : tensor<4xf32>
    %new = stablehlo.subtract %w, %step : tensor<4xf32>
    return %new : tensor<4xf32>
  }
}
)";

TEST(PjrtRuntime, DonatedParameterIsUpdatedInPlaceAndRefusedAfterwards) {
  Client& client = test_client();
  Executable step = client.compile(kSgdStep);
  std::vector<float> w0 = {1.f, 2.f, 3.f, 4.f}, g = {0.5f, -1.f, 2.f, 0.f};
  Buffer grad = device(client, g, {4});
  Buffer first = device(client, w0, {4});
  std::vector<Buffer> out = step.execute({&first, &grad}, {0});
  EXPECT_FALSE(first.valid());
  EXPECT_TITAN_ERROR(first.to_host(w0.data()), "buffer was donated to ", step.name());
  EXPECT_TITAN_ERROR(step.execute({&first, &grad}, {0}), "argument 0", "buffer was donated to ", step.name());
  Buffer w = std::move(out[0]);
  for (int i = 1; i < 3; ++i) {
    Buffer next = std::move(step.execute({&w, &grad}, {0})[0]);
    EXPECT_FALSE(w.valid());
    w = std::move(next);
  }
  std::vector<float> want(4);
  for (int i = 0; i < 4; ++i) want[i] = w0[i] - 3 * 0.5f * g[i];
  expect_near(host<float>(w), want, "three updates");
  EXPECT_TRUE(grad.valid()) << "an argument left out of `donated` survives";
}

TEST(PjrtRuntime, AliasedParameterLeftOutOfDonatedIsKept) {
  Client& client = test_client();
  Executable step = client.compile(kSgdStep);
  std::vector<float> w0 = {1.f, 2.f, 3.f, 4.f}, g = {1.f, 1.f, 1.f, 1.f};
  Buffer w = device(client, w0, {4}), grad = device(client, g, {4});
  std::vector<Buffer> out = step.execute({&w, &grad});
  ASSERT_TRUE(w.valid());
  expect_near(host<float>(w), w0, "kept parameter");
  expect_near(host<float>(out[0]), {0.5f, 1.5f, 2.5f, 3.5f}, "update");
  EXPECT_TITAN_ERROR(step.execute({&w, &grad}, {1}), "argument 1", "cannot be donated", "tf.aliasing_output");
  EXPECT_TITAN_ERROR(step.execute({&w, &grad}, {2}), "donated index 2", "out of range");
  EXPECT_TITAN_ERROR(step.execute({&w, &w}, {0}), "argument 0", "also argument 1");
}

TEST(PjrtRuntime, Bf16BuffersRoundTrip) {
  Client& client = test_client();
  std::vector<bf16> x;
  for (float v : {1.f, -2.5f, 0.0078125f, 3.1415926f, 65504.f, -1e-3f}) x.push_back(bf16(v));
  Buffer d = device(client, x, {2, 3});
  EXPECT_EQ(d.dtype(), kBF16);
  EXPECT_EQ(d.size_bytes(), 12u);
  std::vector<bf16> back = host<bf16>(d);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i].bits, x[i].bits) << i;

  Executable twice = client.compile(R"(
func.func public @main(%x: tensor<2x3xbf16>) -> tensor<2x3xbf16> {
  %y = stablehlo.add %x, %x : tensor<2x3xbf16>
  return %y : tensor<2x3xbf16>
})");
  std::vector<Buffer> out = twice.execute({&d});
  EXPECT_EQ(out[0].dtype(), kBF16);
  std::vector<bf16> doubled = host<bf16>(out[0]);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(static_cast<float>(doubled[i]), 2 * static_cast<float>(x[i])) << i;
}

// Where the plugin counts its device memory (the GPU plugins), a buffer's bytes show in it while it
// lives; the CPU plugins keep no device allocator and say so by answering nothing.
TEST(PjrtRuntime, DeviceMemoryStatsCountALiveBuffer) {
  Client& client = test_client();
  const auto before = client.memory_stats();
  if (!before) GTEST_SKIP() << client.platform_name() << " reports no device memory statistics";
  std::optional<Buffer> big = device(client, std::vector<float>(1 << 22, 1.0f), {1 << 22});
  const auto during = client.memory_stats();
  ASSERT_TRUE(during);
  EXPECT_GE(during->bytes_in_use - before->bytes_in_use, int64_t{4} << 22);
  if (during->peak_bytes_in_use) {
    EXPECT_GE(*during->peak_bytes_in_use, during->bytes_in_use);
  }
  big.reset();
  EXPECT_LT(client.memory_stats()->bytes_in_use, during->bytes_in_use);
}

TEST(PjrtRuntime, WhileLoopRuns) {
  Client& client = test_client();
  // Doubles x ten times; also returns the counter (an i32 result).
  Executable loop = client.compile(R"(
func.func public @main(%x: tensor<f32>) -> (tensor<f32>, tensor<i32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %n = stablehlo.constant dense<10> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %two = stablehlo.constant dense<2.0> : tensor<f32>
  %r:2 = stablehlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<f32>
    cond {
      %more = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %more : tensor<i1>
    } do {
      %next = stablehlo.add %i, %one : tensor<i32>
      %twice = stablehlo.multiply %acc, %two : tensor<f32>
      stablehlo.return %next, %twice : tensor<i32>, tensor<f32>
    }
  return %r#1, %r#0 : tensor<f32>, tensor<i32>
})");
  std::vector<float> x = {1.5f};
  Buffer dx = device(client, x, {});
  std::vector<Buffer> out = loop.execute({&dx});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(host<float>(out[0]), std::vector<float>{1536.f});
  EXPECT_EQ(out[1].dtype(), kI32);
  EXPECT_EQ(host<int32_t>(out[1]), std::vector<int32_t>{10});
}

TEST(PjrtRuntime, ArgumentsAreCheckedBeforeTheRun) {
  Client& client = test_client();
  Executable exe = client.compile(kThreeResults);
  ThreeResults m;
  Buffer a = device(client, m.a, {2, 3}), c = device(client, m.c, {2, 3});
  EXPECT_TITAN_ERROR(exe.execute({&a, &c}), "takes 3 arguments", "got 2");
  EXPECT_TITAN_ERROR(exe.execute({&a, &c, &c}), "argument 1", "expected tensor<3x2xf32>, found f32[2, 3]");
  std::vector<int32_t> ints(6, 1);
  Buffer i = device(client, ints, {3, 2});
  EXPECT_TITAN_ERROR(exe.execute({&a, &i, &c}), "argument 1", "expected tensor<3x2xf32>, found i32[3, 2]");
  Buffer empty;
  EXPECT_TITAN_ERROR(exe.execute({&a, &empty, &c}), "argument 1", "empty buffer");
}

TEST(PjrtRuntime, OutputOfATypeTitanLacksIsRefused) {
  Client& client = test_client();
  Executable exe = client.compile(R"(
module @greater {
  func.func public @main(%x: tensor<2xf32>) -> tensor<2xi1> {
    %y = stablehlo.compare GT, %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
    return %y : tensor<2xi1>
  }
})");
  std::vector<float> x = {1.f, 2.f};
  Buffer dx = device(client, x, {2});
  EXPECT_TITAN_ERROR(exe.execute({&dx}), "output 0 of greater has PJRT element type PRED", "no dtype");
}

TEST(PjrtRuntime, MalformedProgramGivesTheCompilersMessage) {
  EXPECT_TITAN_ERROR(test_client().compile(R"(
func.func public @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = stablehlo.no_such_op %x : tensor<2xf32>
  return %y : tensor<2xf32>
})"),
                     "PJRT_Client_Compile failed", "stablehlo.no_such_op");
}

TEST(PjrtPlugin, MissingPluginIsRefusedWithWhatToDo) {
  EXPECT_TITAN_ERROR(Plugin::load("/nonexistent/titan/plugin.so"), "not found",
                     "/nonexistent/titan/plugin.so", "PJRT plugin");
  EXPECT_TITAN_ERROR(Plugin::load("gpu"), "unknown PJRT plugin 'gpu'", "cpu, cuda, tpu");
  const std::filesystem::path dir = test::fresh_temp_dir("pjrt_empty_dir");
  const char* old = std::getenv("TITAN_PJRT_DIR");
  const std::string saved = old ? old : "";
  setenv("TITAN_PJRT_DIR", dir.c_str(), 1);
  EXPECT_TITAN_ERROR(Plugin::load("cpu"), "PJRT plugin 'cpu' not found",
                     (dir / "cpu/pjrt_c_api_cpu_plugin.so").string(), "scripts/setup.sh", "TITAN_PJRT_DIR");
  old ? setenv("TITAN_PJRT_DIR", saved.c_str(), 1) : unsetenv("TITAN_PJRT_DIR");
}

TEST(PjrtPlugin, FileThatIsNotAPluginIsRefused) {
  const std::filesystem::path file = test::fresh_temp_dir("pjrt_not_a_plugin") / "not_a_plugin.so";
  std::ofstream(file) << "this is text, not a shared library\n";
  EXPECT_TITAN_ERROR(Plugin::load(file.string()), "cannot load PJRT plugin", file.string(),
                     "must be a shared library for this machine");
}

TEST(PjrtPlugin, SharedLibraryWithoutGetPjrtApiIsRefused) {
  // The C library: a real shared library every process has, that is no plugin.
  Dl_info libc{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&std::printf), &libc), 0);
  EXPECT_TITAN_ERROR(Plugin::load(libc.dli_fname), "exports no GetPjrtApi", libc.dli_fname);
}

TEST(PjrtPlugin, WrongApiVersionsAreRefused) {
  EXPECT_TITAN_ERROR(Plugin::load(test::paths::fake_pjrt_plugin_major_1()), "implements PJRT C API 1.81",
                     "major version 0");
  EXPECT_TITAN_ERROR(Plugin::load(test::paths::fake_pjrt_plugin_minor_50()), "implements PJRT C API 0.50",
                     "older than the 0.81", "use a newer plugin");
}

}  // namespace
}  // namespace titan

namespace titan {
namespace {

// One program over 4 CPU devices of one process, split by XLA's SPMD partitioner from its
// mhlo.sharding annotations (the base of graph mode across devices): x [8, 4] by rows (data
// parallel), w [4, 3] replicated or by rows (FSDP: the partitioner gathers it), y = x w by rows
// and sum(y) replicated (an all-reduce). Each device's shards against the host's products.
TEST(PjrtRuntime, SpmdProgramRunsShardedOverFourCpuDevices) {
  if (plugin_under_test() != "cpu") GTEST_SKIP() << "the CPU plugin's device count makes the 4 devices";
  Client c = Client::create(Plugin::load("cpu"), {{"cpu_device_count", int64_t{4}}});
  ASSERT_EQ(c.device_count(), 4);
  std::vector<float> x(32), w(12);
  for (int i = 0; i < 32; ++i) x[i] = 0.1f * static_cast<float>(i) - 1.0f;
  for (int i = 0; i < 12; ++i) w[i] = 1.0f - 0.15f * static_cast<float>(i);
  for (const bool fsdp : {false, true}) {
    SCOPED_TRACE(fsdp ? "w by rows (FSDP)" : "w replicated");
    const std::string rows = "\"{devices=[4,1]0,1,2,3}\"", w_sharding = fsdp ? rows : "\"{replicated}\"";
    const std::string text =
        "module @sharded attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {\n"
        "  func.func public @main(%x: tensor<8x4xf32> {mhlo.sharding = " + rows +
        "}, %w: tensor<4x3xf32> {mhlo.sharding = " + w_sharding +
        "}) -> (tensor<8x3xf32> {mhlo.sharding = " + rows + "}, tensor<f32> {mhlo.sharding = \"{replicated}\"}) {\n"
        "    %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x4xf32>, tensor<4x3xf32>) -> "
        "tensor<8x3xf32>\n"
        "    %zero = stablehlo.constant dense<0.0> : tensor<f32>\n"
        "    %s = stablehlo.reduce(%y init: %zero) applies stablehlo.add across dimensions = [0, 1] : "
        "(tensor<8x3xf32>, tensor<f32>) -> tensor<f32>\n"
        "    return %y, %s : tensor<8x3xf32>, tensor<f32>\n  }\n}\n";
    Executable e = c.compile(text, {.num_partitions = 4, .spmd_partitioning = true});
    std::vector<Buffer> xs, ws;
    for (int d = 0; d < 4; ++d) {
      xs.push_back(c.to_device(x.data() + 8 * d, kF32, {2, 4}, d));
      ws.push_back(fsdp ? c.to_device(w.data() + 3 * d, kF32, {1, 3}, d) : c.to_device(w.data(), kF32, {4, 3}, d));
    }
    std::vector<std::vector<Buffer*>> args;
    for (int d = 0; d < 4; ++d) args.push_back({&xs[d], &ws[d]});
    const std::vector<std::vector<Buffer>> out = e.execute_partitioned(args);
    ASSERT_EQ(out.size(), 4u);
    double total = 0;
    for (int r = 0; r < 8; ++r)
      for (int j = 0; j < 3; ++j) {
        double v = 0;
        for (int k = 0; k < 4; ++k) v += static_cast<double>(x[r * 4 + k]) * w[k * 3 + j];
        total += v;
        EXPECT_NEAR(host<float>(out[r / 2][0])[(r % 2) * 3 + j], v, 1e-5) << "y[" << r << ", " << j << "]";
      }
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(out[d][0].dims(), (Shape{2, 3})) << "device " << d << " holds its 2 rows of y";
      EXPECT_NEAR(host<float>(out[d][1])[0], total, 1e-4) << "device " << d << "'s sum, all-reduced";
    }
    EXPECT_TITAN_ERROR(e.execute_partitioned({args[0]}), "runs on 4 devices, but arguments for 1 were given");
  }
}

}  // namespace
}  // namespace titan
