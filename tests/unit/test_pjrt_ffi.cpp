// Custom calls (graph/pjrt/ffi.h): a titan handler registered through a plugin's FFI extension,
// called from a program that graph::hlo::custom_call wrote, on both CPU plugins; and the errors
// when a target is not registered, an attribute is missing or the handler refuses its input.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/rng.h"
#include "titan/core/tensor.h"
#include "titan/graph/ir/hlo.h"
#include "titan/graph/pjrt/client.h"
#include "titan/graph/pjrt/ffi.h"
#include "titan/kernels/cpu/adamw.h"
#include "titan/ops/custom_calls.h"
#include "titan/ops/norm.h"

namespace titan {
namespace {

namespace ffi = graph::pjrt::ffi;
using graph::pjrt::Buffer;
using graph::pjrt::Client;
using graph::pjrt::Executable;
using graph::pjrt::Plugin;

// out = x * factor, elementwise on f32: the smallest handler that reads an argument, a result and
// an attribute.
void scale(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 1 && call.num_results() == 1, "titan_scale takes one array and gives one, got ",
              call.num_args(), " and ", call.num_results());
  const ffi::Array x = call.arg(0), out = call.result(0);
  TITAN_CHECK(x.dims == out.dims, "titan_scale: result ", shape_str(out.dims), " is not the argument's shape ",
              shape_str(x.dims));
  const double factor = call.scalar_attr("factor");
  TITAN_CHECK(factor >= 0, "titan_scale: factor ", factor, " is negative; it takes factors >= 0");
  const float* in = x.as<float>("titan_scale's argument");
  float* o = out.as<float>("titan_scale's result");
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] * static_cast<float>(factor);
}

std::string second_cpu_plugin() { return Plugin::plugin_dir() + "/cpu-xla-cpu-pjrt/xla_cpu_pjrt.so"; }

Client& client_of(const std::string& name) {
  static std::map<std::string, Client> clients;
  auto it = clients.find(name);
  if (it == clients.end()) {
    it = clients.emplace(name, Client::create(Plugin::load(name), {{"cpu_device_count", int64_t{1}}})).first;
  }
  return it->second;
}

// main(x: f32[2,3]) = custom_call(target, x, attrs) + x: the handler's result feeds an XLA op.
std::string scale_module(const std::string& target, const std::vector<std::pair<std::string, double>>& attrs) {
  graph::Program program;
  graph::CaptureScope scope(program);
  const graph::Value x = program.parameter({2, 3}, kF32, "x", graph::InputKind::batch);
  const graph::Value y = graph::hlo::custom_call(target, {x}, {{{2, 3}, kF32, false}}, attrs)[0];
  return program.module_text({graph::hlo::add(y, x)});
}

std::vector<float> run(Client& client, const std::string& module, const std::vector<float>& x) {
  Executable exe = client.compile(module);
  Buffer in = client.to_device(x.data(), kF32, {2, 3});
  std::vector<Buffer> out = exe.execute({&in});
  std::vector<float> host(6);
  out.at(0).to_host(host.data());
  return host;
}

const std::vector<float> kX = {1.f, -2.f, 0.5f, 4.f, 0.f, -0.25f};

void expect_scaled(const std::string& plugin) {
  Client& client = client_of(plugin);
  ffi::register_handler(client.plugin(), "titan_scale", ffi::handler<scale>);
  const std::vector<float> got = run(client, scale_module("titan_scale", {{"factor", 2.5}}), kX);
  for (size_t i = 0; i < kX.size(); ++i) EXPECT_FLOAT_EQ(got[i], kX[i] * 3.5f) << plugin << " [" << i << "]";
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PjrtFfi, CustomCallIsPrintedWithTypedApiAndAttributes) {
  const std::string text = scale_module("titan_scale", {{"factor", 2.5}});
  EXPECT_NE(text.find("\"stablehlo.custom_call\"(%"), std::string::npos) << text;
  EXPECT_NE(text.find("api_version = 4 : i32, backend_config = {factor = 2.50000000000000000e+00 : f64}, "
                      "call_target_name = \"titan_scale\""),
            std::string::npos)
      << text;
  EXPECT_NE(error_of([] { scale_module("titan scale", {}); }).find("letters, digits"), std::string::npos);
}

TEST(PjrtFfi, HandlerRunsInsideTheDefaultCpuPlugin) { expect_scaled("cpu"); }

TEST(PjrtFfi, HandlerRunsInsideTheOlderCpuPlugin) { expect_scaled(second_cpu_plugin()); }

TEST(PjrtFfi, UnregisteredTargetIsRefusedAtCompile) {
  Client& client = client_of("cpu");
  const std::string message =
      error_of([&] { client.compile(scale_module("titan_not_registered", {{"factor", 1.0}})); });
  EXPECT_NE(message.find("titan_not_registered"), std::string::npos) << message;
}

TEST(PjrtFfi, HandlerErrorsFailTheRunWithTheirMessage) {
  Client& client = client_of("cpu");
  ffi::register_handler(client.plugin(), "titan_scale", ffi::handler<scale>);
  std::string message = error_of([&] { run(client, scale_module("titan_scale", {{"factor", -1.0}}), kX); });
  EXPECT_NE(message.find("titan_scale: factor -1 is negative"), std::string::npos) << message;
  message = error_of([&] { run(client, scale_module("titan_scale", {{"scale", 2.0}}), kX); });
  EXPECT_NE(message.find("no attribute 'factor' in backend_config (it has: scale)"), std::string::npos) << message;
  // The plugin is usable after a failed run.
  EXPECT_FLOAT_EQ(run(client, scale_module("titan_scale", {{"factor", 1.0}}), kX)[3], 8.f);
}

// A row of a stack taken by a call (graph::Program::dynamic_row, as a loop over layers makes its
// weights and saved results): the call reads it in place, given the stack and the index; an XLA op
// taking the same row gets it sliced out. main(stack: f32[3,2,3], i: i64) =
// reshape(scale(reshape(stack[i], [6]))) + stack[i].
std::string scale_row_module() {
  graph::Program program;
  graph::CaptureScope scope(program);
  const graph::Value stack = program.parameter({3, 2, 3}, kF32, "stack", graph::InputKind::batch);
  const graph::Value i = program.parameter({}, kI64, "i", graph::InputKind::batch);
  const graph::Value row = program.dynamic_row(stack, i);
  const graph::Value flat = graph::hlo::reshape(row, {6});
  const graph::Value y = graph::hlo::custom_call("titan_scale", {flat}, {{{6}, kF32, false}}, {{"factor", 2.5}})[0];
  return program.module_text({graph::hlo::add(graph::hlo::reshape(y, {2, 3}), row)});
}

TEST(PjrtFfi, RowsOfAStackArePassedInPlace) {
  const std::string module = scale_row_module();
  EXPECT_NE(module.find("titan_row_0 = 1.0"), std::string::npos) << "the call takes the stack and the index\n"
                                                                    << module;
  EXPECT_EQ(module.find("titan_row_1"), std::string::npos) << module;
  Client& client = client_of("cpu");
  ffi::register_handler(client.plugin(), "titan_scale", ffi::handler<scale>);
  Executable exe = client.compile(module);
  std::vector<float> stack(18);
  for (size_t k = 0; k < stack.size(); ++k) stack[k] = static_cast<float>(k) - 7.f;
  Buffer s = client.to_device(stack.data(), kF32, {3, 2, 3});
  for (int64_t index : {0, 2}) {
    Buffer i = client.to_device(&index, kI64, {});
    std::vector<float> got(6);
    exe.execute({&s, &i}).at(0).to_host(got.data());
    for (size_t k = 0; k < 6; ++k)
      EXPECT_FLOAT_EQ(got[k], 3.5f * stack[static_cast<size_t>(index) * 6 + k]) << "row " << index << " [" << k << "]";
  }
  const int64_t past = 3;
  Buffer i = client.to_device(&past, kI64, {});
  const std::string message = error_of([&] { exe.execute({&s, &i}); });
  EXPECT_NE(message.find("argument 0 is row 3 of a stack of 3 rows"), std::string::npos) << message;
}

void other_kernel(const ffi::Call&) {}

TEST(PjrtFfi, SecondHandlerForATargetIsRefused) {
  const Plugin& plugin = client_of("cpu").plugin();
  ffi::register_handler(plugin, "titan_scale", ffi::handler<scale>);  // again: a no-op
  const std::string message =
      error_of([&] { ffi::register_handler(plugin, "titan_scale", ffi::handler<other_kernel>); });
  EXPECT_NE(message.find("already has another handler"), std::string::npos) << message;
}

// titan's RMSNorm kernel inside a program gives what the eager op gives: the same kernel on the
// same numbers, so the same bits. rstd is checked against its definition.
TEST(PjrtFfi, RmsNormKernelMatchesTheEagerOp) {
  for (const std::string& plugin : {std::string("cpu"), second_cpu_plugin()}) {
    Client& client = client_of(plugin);
    ops::register_custom_calls(client.plugin());
    const Shape shape = {3, 5, 64};
    const double eps = 1e-5;
    Generator gen(7);
    const Tensor x = Tensor::randn(shape, gen), weight = Tensor::randn({64}, gen);

    graph::Program program;
    graph::CaptureScope scope(program);
    const graph::Value px = program.parameter(shape, kF32, "x", graph::InputKind::batch);
    const graph::Value pw = program.parameter({64}, kF32, "weight", graph::InputKind::batch);
    Executable exe = client.compile(program.module_text(ops::rms_norm_fwd_call(px, pw, eps)));
    const std::vector<float> xs = x.to_vector<float>(), ws = weight.to_vector<float>();
    Buffer bx = client.to_device(xs.data(), kF32, shape), bw = client.to_device(ws.data(), kF32, {64});
    std::vector<Buffer> out = exe.execute({&bx, &bw});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].dims(), Shape{15});
    std::vector<float> y(static_cast<size_t>(x.numel())), rstd(15);
    out[0].to_host(y.data());
    out[1].to_host(rstd.data());

    EXPECT_EQ(y, ops::rms_norm(x, weight, eps).to_vector<float>()) << plugin;
    for (size_t r = 0; r < rstd.size(); ++r) {
      double sum = 0;
      for (size_t i = 0; i < 64; ++i) sum += static_cast<double>(xs[r * 64 + i]) * xs[r * 64 + i];
      EXPECT_NEAR(rstd[r], 1.0 / std::sqrt(sum / 64 + eps), 1e-5) << plugin << " row " << r;
    }
  }
}

TEST(PjrtFfi, RmsNormKernelRefusesAnotherDtype) {
  Client& client = client_of("cpu");
  ops::register_custom_calls(client.plugin());
  graph::Program program;
  graph::CaptureScope scope(program);
  const graph::Value px = program.parameter({2, 4}, kI32, "x", graph::InputKind::batch);
  const graph::Value pw = program.parameter({4}, kI32, "weight", graph::InputKind::batch);
  Executable exe = client.compile(program.module_text(ops::rms_norm_fwd_call(px, pw, 1e-6)));
  const std::vector<int32_t> xs(8, 1), ws(4, 1);
  Buffer bx = client.to_device(xs.data(), kI32, {2, 4}), bw = client.to_device(ws.data(), kI32, {4});
  const std::string message = error_of([&] { exe.execute({&bx, &bw}); });
  EXPECT_NE(message.find("titan_rms_norm_fwd: x is i32; the kernel takes f32 or f64"), std::string::npos) << message;
}

// AdamW's update as a call gives the eager kernel's bits, writing each state array in place of its
// operand (XLA copies the operand first here: the program's inputs are not donated).
TEST(PjrtFfi, AdamWUpdateIsTheEagerKernelInPlace) {
  Client& client = client_of("cpu");
  ops::register_custom_calls(client.plugin());
  const int64_t n = 1037;
  Generator gen(11);
  std::vector<std::vector<float>> host;  // param, grad, exp_avg, exp_avg_sq
  for (int k = 0; k < 4; ++k) host.push_back(Tensor::randn({n}, gen).to_vector<float>());
  for (float& v : host[3]) v = v * v;
  const kernels::cpu::AdamWHyper h{.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                                   .step = 7, .grad_scale = 0.37};
  const kernels::cpu::AdamWScalars s = kernels::cpu::adamw_scalars(h);
  const std::vector<double> scalars{s.decay, s.neg_step_size, s.bc2_sqrt, h.grad_scale};

  graph::Program program;
  graph::CaptureScope scope(program);
  std::vector<graph::Value> arrays, scalar_values;
  for (const char* name : {"param", "grad", "exp_avg", "exp_avg_sq"})
    arrays.push_back(program.parameter({n}, kF32, name, graph::InputKind::batch));
  for (const char* name : {"decay", "neg_step_size", "bc2_sqrt", "grad_scale"})
    scalar_values.push_back(program.parameter({}, kF64, name, graph::InputKind::batch));
  const std::string module = program.module_text(
      ops::adamw_call(arrays[0], arrays[1], arrays[2], arrays[3], scalar_values, h.beta1, h.beta2, h.eps));
  EXPECT_NE(module.find("output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], "
                        "operand_index = 0"),
            std::string::npos)
      << module;
  Executable exe = client.compile(module);
  std::vector<Buffer> in;
  for (const auto& a : host) in.push_back(client.to_device(a.data(), kF32, {n}));
  for (const double& v : scalars) in.push_back(client.to_device(&v, kF64, {}));
  std::vector<Buffer*> args;
  for (Buffer& b : in) args.push_back(&b);
  std::vector<Buffer> out = exe.execute(args);
  ASSERT_EQ(out.size(), 3u);

  std::vector<std::vector<float>> want = host;
  kernels::cpu::adamw_step<float>(want[0].data(), want[1].data(), want[2].data(), want[3].data(), n, h);
  const char* names[] = {"param", "exp_avg", "exp_avg_sq"};
  const size_t of[] = {0, 2, 3};
  for (size_t r = 0; r < 3; ++r) {
    std::vector<float> got(static_cast<size_t>(n));
    out[r].to_host(got.data());
    EXPECT_EQ(got, want[of[r]]) << names[r];
  }
}

}  // namespace
}  // namespace titan
