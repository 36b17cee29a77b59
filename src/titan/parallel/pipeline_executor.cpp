#include "titan/parallel/pipeline_executor.h"

#include <chrono>
#include <map>
#include <optional>
#include <utility>

#include "titan/autograd/engine.h"
#include "titan/core/stopwatch.h"
#include "titan/core/trace.h"

namespace titan::parallel {

namespace {

using Clock = std::chrono::steady_clock;

// What moves between stages: a stage's activations forward, their gradient back.
enum class Carry { activation = 0, gradient = 1 };
using Key = std::pair<int64_t, int64_t>;  // (micro, stage)

}  // namespace

PipelineExecutor::PipelineExecutor(PipelineSchedule schedule, dist::ProcessGroup group, Shape activation_shape,
                                   DType dtype)
    : schedule_(std::move(schedule)),
      group_(std::move(group)),
      activation_shape_(std::move(activation_shape)),
      dtype_(dtype) {
  TITAN_CHECK(schedule_.ranks == group_.size(), "pipeline executor: a schedule for ", schedule_.ranks,
              " ranks over a group of ", group_.size());
  // MPI guarantees tags up to 32767.
  TITAN_CHECK(2 * schedule_.num_stages() * schedule_.micro_batches <= 32767, "pipeline executor: ",
              schedule_.num_stages(), " stages x ", schedule_.micro_batches,
              " micro-batches are more transfers than message tags can name; use fewer micro-batches per step "
              "(raise parallelism.pipeline_parallel_microbatch_size)");
}

PipelineStepStats PipelineExecutor::run(const std::function<Tensor(int64_t micro)>& first_input,
                                        const StageForward& forward, double grad_scale) {
  const Clock::time_point start = Clock::now();
  const int rank = group_.rank();
  const int64_t last_stage = schedule_.num_stages() - 1;
  const std::vector<PipelineStep>& steps = schedule_.steps[static_cast<size_t>(rank)];
  auto tag = [&](Carry carry, int64_t micro, int64_t stage) {
    return static_cast<int>((static_cast<int64_t>(carry) * schedule_.num_stages() + stage) * schedule_.micro_batches +
                            micro);
  };

  struct Received {
    Tensor buffer;
    dist::Work work;
  };
  std::map<std::pair<Carry, Key>, Received> receiving;
  std::map<std::pair<Carry, Key>, Tensor> handed_over;  // between stages of this rank
  std::vector<std::pair<Tensor, dist::Work>> sending;
  struct Live {
    Tensor input;
    StageResult result;
  };
  std::map<Key, Live> live;
  std::map<Key, autograd::DeferredWeightGrads> deferred;
  PipelineStepStats stats;

  // What step `s` receives from another rank: (what, from which stage's rank), if anything.
  auto incoming = [&](const PipelineStep& s) -> std::optional<std::pair<Carry, int64_t>> {
    if (s.op == PipelineOp::forward && s.stage > 0) return std::pair{Carry::activation, s.stage - 1};
    if ((s.op == PipelineOp::backward || s.op == PipelineOp::backward_input) && s.stage < last_stage)
      return std::pair{Carry::gradient, s.stage + 1};
    return std::nullopt;
  };
  auto post_receive = [&](const PipelineStep& s) {
    const auto in = incoming(s);
    if (!in) return;
    const int src = static_cast<int>(schedule_.rank_of_stage(in->second));
    const auto key = std::pair{in->first, Key{s.micro, s.stage}};
    if (src == rank || receiving.count(key)) return;
    Tensor buffer = Tensor::empty(activation_shape_, {.dtype = dtype_});
    dist::Work work = group_.recv(buffer, src, tag(in->first, s.micro, s.stage));
    receiving.emplace(key, Received{buffer, std::move(work)});
  };
  auto take = [&](Carry carry, const PipelineStep& s) {
    const auto key = std::pair{carry, Key{s.micro, s.stage}};
    if (auto local = handed_over.find(key); local != handed_over.end()) {
      Tensor t = local->second;
      handed_over.erase(local);
      return t;
    }
    auto it = receiving.find(key);
    TITAN_CHECK(it != receiving.end(), "pipeline executor: internal error: nothing posted for micro-batch ",
                s.micro, " of stage ", s.stage);
    trace::Span span("pipeline receive", "comm");
    it->second.work.wait();
    Tensor t = it->second.buffer;
    receiving.erase(it);
    return t;
  };
  auto give = [&](Carry carry, const Tensor& t, int64_t micro, int64_t to_stage) {
    TITAN_CHECK(t.sizes() == activation_shape_ && t.dtype() == dtype_, "pipeline parallelism: stage ",
                carry == Carry::activation ? to_stage - 1 : to_stage + 1, " hands micro-batch ", micro, " ",
                t.desc(), " to stage ", to_stage, ", which expects ", shape_str(activation_shape_),
                "; every micro-batch must have the shape the pipeline was built for");
    const int dst = static_cast<int>(schedule_.rank_of_stage(to_stage));
    Tensor payload = t.detach().contiguous();
    if (dst == rank) {
      handed_over[{carry, Key{micro, to_stage}}] = payload;
      return;
    }
    stats.bytes_sent += static_cast<double>(payload.nbytes());
    dist::Work work = group_.send(payload, dst, tag(carry, micro, to_stage));
    sending.emplace_back(payload, std::move(work));
  };
  auto seed = [&](const Tensor& like) { return Tensor::full({}, grad_scale, {.dtype = like.dtype()}); };

  constexpr size_t kLookahead = 2;
  for (size_t i = 0; i < steps.size(); ++i) {
    for (size_t j = i; j < std::min(steps.size(), i + 1 + kLookahead); ++j) post_receive(steps[j]);
    const PipelineStep& s = steps[i];
    const Key key{s.micro, s.stage};
    if (s.op == PipelineOp::forward) {
      Tensor input = s.stage == 0 ? first_input(s.micro) : take(Carry::activation, s).detach().requires_grad_(true);
      const Clock::time_point t0 = Clock::now();
      StageResult result = forward(s.stage, s.micro, input);
      stats.compute_seconds += seconds_since(t0);
      if (s.stage < last_stage)
        give(Carry::activation, result.output, s.micro, s.stage + 1);
      else
        stats.loss_sum += result.output.item();
      if (result.aux.defined()) {
        const double aux = result.aux.item();
        stats.aux_sum += aux;
        stats.loss_sum += aux;
        stats.has_aux = true;
      }
      live.emplace(key, Live{input, std::move(result)});
      continue;
    }
    if (s.op == PipelineOp::backward_weight) {
      auto it = deferred.find(key);
      TITAN_CHECK(it != deferred.end(), "pipeline executor: weight gradients of micro-batch ", s.micro, " of stage ",
                  s.stage, " before its input gradients");
      const Clock::time_point t0 = Clock::now();
      it->second.run();
      stats.compute_seconds += seconds_since(t0);
      deferred.erase(it);
      continue;
    }
    auto it = live.find(key);
    TITAN_CHECK(it != live.end(), "pipeline executor: backward of micro-batch ", s.micro, " of stage ", s.stage,
                " before its forward");
    Live f = std::move(it->second);
    live.erase(it);
    std::vector<Tensor> roots{f.result.output};
    std::vector<Tensor> grads{s.stage == last_stage ? seed(f.result.output) : take(Carry::gradient, s)};
    if (f.result.aux.defined()) {
      roots.push_back(f.result.aux);
      grads.push_back(seed(f.result.aux));
    }
    const Clock::time_point t0 = Clock::now();
    Tensor input_grad;
    if (s.op == PipelineOp::backward) {
      autograd::backward(roots, grads);
      if (s.stage > 0) input_grad = f.input.grad();
    } else {
      std::vector<Tensor> inputs;
      if (s.stage > 0) inputs.push_back(f.input);
      std::vector<Tensor> got = autograd::backward_split(roots, grads, inputs, deferred[key]);
      if (s.stage > 0) input_grad = got[0];
    }
    stats.compute_seconds += seconds_since(t0);
    if (s.stage > 0) {
      TITAN_CHECK(input_grad.defined(), "pipeline parallelism: no gradient reached the input of stage ", s.stage,
                  " for micro-batch ", s.micro);
      give(Carry::gradient, input_grad, s.micro, s.stage - 1);
    }
  }
  for (auto& [payload, work] : sending) work.wait();
  TITAN_CHECK(live.empty() && deferred.empty() && receiving.empty() && handed_over.empty(),
              "pipeline executor: rank ", rank, "'s row of the ", schedule_.name,
              " table left work undone (a forward without its backward, or weight gradients never computed)");
  stats.wall_seconds = seconds_since(start);
  return stats;
}

}  // namespace titan::parallel
