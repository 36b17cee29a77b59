// FLUX's transformer in graph mode: its training step's forward and backward (flow-matching loss)
// captured as one program through the test runner's PJRT plugin, against eager; and the sinusoid
// op it embeds timesteps with, whose lowering lets new timesteps reuse one compiled program.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "titan/models/flux/model.h"
#include "titan/ops/sinusoid.h"
#include "titan/train/flux/rectified_flow.h"
#include "titan/train/graph_mode/captured_function.h"
#include "titan/train/graph_mode/stacked_state.h"

namespace titan {
namespace {

namespace fm = models::flux;
namespace tf = train::flux;

TEST(GraphOps, SinusoidMatchesEagerInBothDtypes) {
  const Tensor t = test::rand_f32({5}, 11, 0, 1000);
  const Tensor freqs = test::rand_f32({9}, 12, 0, 1);
  const test::GraphEager r = test::run_eager_and_graph(
      [&](const auto& v) { return std::vector<Tensor>{ops::sinusoid(v[0], freqs)}; }, {t}, false);
  // |arg| <= 1000: one f32 ulp of the argument (6e-5) bounds the two sides' cos/sin difference.
  EXPECT_TRUE(test::tensors_close(r.graph[0], r.eager[0], 1e-4, "sinusoid f32"));
  const Tensor f64 = freqs.to(kF64);
  const test::GraphEager r64 = test::run_eager_and_graph(
      [&](const auto& v) { return std::vector<Tensor>{ops::sinusoid(v[0], f64)}; }, {t.to(kF64)}, false);
  EXPECT_TRUE(test::tensors_close(r64.graph[0], r64.eager[0], 1e-12, "sinusoid f64"));
}

TEST(Sinusoid, IsCosThenSinOfEachProductAndRefusesAGradient) {
  const Tensor t = Tensor::from_vector<float>({0.5f, -2.0f}, {2});
  const Tensor f = Tensor::from_vector<float>({1.0f, 0.25f, 3.0f}, {3});
  const std::vector<float> out = ops::sinusoid(t, f).to_vector<float>();
  ASSERT_EQ(out.size(), 12u);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i) {
      const float arg = t.to_vector<float>()[b] * f.to_vector<float>()[i];
      EXPECT_EQ(out[b * 6 + i], std::cos(arg));
      EXPECT_EQ(out[b * 6 + 3 + i], std::sin(arg));
    }
  EXPECT_TITAN_ERROR(ops::sinusoid(t.clone().requires_grad_(), f), "requires grad", "detach");
  EXPECT_TITAN_ERROR(ops::sinusoid(t, f.to(kF64)), "freqs", "f32");
}

struct Batch {
  Tensor x0, noise, txt, y, t;
};

// The loss of one training step: x_t from (x0, noise, t), the model's velocity, the MSE.
Tensor step_loss(fm::FluxTransformer& model, const Batch& b, const Tensor& img_ids, const Tensor& txt_ids) {
  fm::FluxInputs in;
  in.img = tf::noisy_latents(b.x0, b.noise, b.t);
  in.img_ids = img_ids;
  in.txt = b.txt;
  in.txt_ids = txt_ids;
  in.timesteps = b.t;
  in.y = b.y;
  return tf::flow_matching_loss(model(in), b.x0, b.noise);
}

// One capture per timestep batch: the program text is the same, so the runner compiles it once
// (its cache is keyed by the text), and each run's loss and every parameter's gradient are
// eager's within 1e-5. `loop`: the blocks run as two loops (double, single) over their stacked
// weights, keeping `saves` for the backward.
void expect_step_matches_eager(bool loop, graph::ScanSaves saves) {
  const fm::FluxModelArgs a = fm::flux_flavor("flux-tiny");
  fm::FluxTransformer model(a);
  Generator gen(21);
  model.init_weights(gen);
  const int64_t batch = 2, txt_len = 7;
  const Tensor img_ids = fm::image_ids(8, 8, a.patch_size), txt_ids = fm::text_ids(txt_len);
  const int64_t img_len = img_ids.size(0);
  const Batch base{.x0 = Tensor::randn({batch, img_len, a.in_channels}, gen),
                   .noise = Tensor::randn({batch, img_len, a.in_channels}, gen),
                   .txt = Tensor::randn({batch, txt_len, a.context_in_dim}, gen),
                   .y = Tensor::randn({batch, a.vec_in_dim}, gen),
                   .t = Tensor()};
  std::vector<std::pair<std::string, Tensor>> params = model.named_parameters();

  graph::Runner& runner = test::test_runner();
  std::string first_module;
  int64_t compiles_after_first = 0;
  for (const std::vector<float>& ts : {std::vector<float>{0.13f, 0.71f}, std::vector<float>{0.94f, 0.02f}}) {
    Batch b = base;
    b.t = Tensor::from_vector<float>(ts, {batch});
    SCOPED_TRACE("t = " + std::to_string(ts[0]) + ", " + std::to_string(ts[1]));

    model.zero_grad();
    const Tensor eager_loss = step_loss(model, b, img_ids, txt_ids);
    eager_loss.backward();
    std::vector<Tensor> eager_grads;
    for (const auto& [name, p] : params) eager_grads.push_back(p.grad().clone());
    model.zero_grad();

    Batch lazy = b;
    std::vector<Tensor> inputs;
    for (Tensor* t : {&lazy.x0, &lazy.noise, &lazy.txt, &lazy.y, &lazy.t}) {
      *t = t->clone();
      inputs.push_back(*t);
    }
    for (const auto& [name, p] : params) inputs.push_back(p);
    train::CapturedFunction step(
        runner, [&] { return std::vector<Tensor>{step_loss(model, lazy, img_ids, txt_ids)}; }, inputs,
        {Tensor::ones(eager_loss.sizes())}, {.scan_layers = loop, .scan_saves = saves});
    if (first_module.empty()) {
      first_module = step.module();
      compiles_after_first = runner.compiles();
      EXPECT_EQ(test::occurrences(first_module, "stablehlo.while"), loop ? 4u : 0u)
          << "a forward and a backward loop for each kind of block";
    } else {
      EXPECT_EQ(step.module(), first_module) << "the timesteps must be a value of the program, not constants";
      EXPECT_EQ(runner.compiles(), compiles_after_first) << "new timesteps compiled the program again";
    }
    const std::vector<Tensor> out = step.run_to_host();
    ASSERT_EQ(out.size(), 1 + params.size());
    EXPECT_TRUE(test::tensors_close(out[0], eager_loss.detach(), 1e-5, "loss"));
    double worst = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(test::tensors_close(out[1 + i], eager_grads[i], 1e-5, "d " + params[i].first));
      worst = std::max(worst, test::max_relative_error(out[1 + i], eager_grads[i]));
    }
    std::printf("[ measured ] %s: loss %.9g vs eager %.9g, worst gradient relative error %.3g\n",
                loop ? "loop" : "unrolled", out[0].item(), eager_loss.item(), worst);
  }
}

TEST(FluxGraph, TrainingStepMatchesEagerForNewTimestepsWithOneCompile) {
  expect_step_matches_eager(false, graph::ScanSaves::all);
}

// Keeping only each block's input: the backward's loop computes the blocks' forward again, the
// ScanSaves furthest from eager's order of work (the others passed alike, at 20 s each).
TEST(FluxGraph, BlocksAsLoopsMatchEagerForNewTimestepsWithOneCompile) {
  expect_step_matches_eager(true, graph::ScanSaves::inputs);
}

// Graph mode's training state (the trainer's FLUX step) keeps each kind of block parameter as one
// [blocks, ...] stack for the loops, per list: every double and single block parameter is a row.
TEST(FluxGraph, TrainingStateStacksTheDoubleAndSingleBlocks) {
  fm::FluxTransformer model(fm::flux_flavor("flux-tiny"));
  const std::vector<std::pair<std::string, Tensor>> params = model.named_parameters();
  const optim::AdamW optimizer(params);
  size_t in_blocks = 0, stacked_members = 0;
  for (const auto& [name, p] : params) in_blocks += name.find("_blocks.") != std::string::npos;
  for (const train::StateSlot& slot : train::plan_state(params, optimizer, true, {"double_blocks", "single_blocks"}))
    if (slot.stacked) {
      EXPECT_TRUE(slot.name.starts_with("double_blocks.*.") || slot.name.starts_with("single_blocks.*.")) << slot.name;
      EXPECT_EQ(slot.shape[0], 2) << slot.name;
      stacked_members += slot.members.size();
    }
  EXPECT_EQ(stacked_members, in_blocks);
  EXPECT_GT(in_blocks, 0u);
}

}  // namespace
}  // namespace titan
