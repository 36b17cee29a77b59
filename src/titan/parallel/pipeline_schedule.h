#pragma once
// Pipeline-parallel schedules as data: per pp rank, the list of (op, micro-batch, stage) steps it
// runs in order. The executor (parallel/pipeline_executor.h) only walks these lists, so a new
// schedule is a new table, and a table can be checked (validate_schedule), timed
// (simulate_schedule) and printed (format_schedule) without running a model.
//
// Semantics every table is checked and timed against: each rank runs its list in order; sends
// never block (buffered); a forward of stage s > 0 waits for the forward of stage s-1 of its
// micro-batch; a backward (or backward_input) of stage s waits for that of stage s+1, the last
// stage's for its own forward; a backward_weight waits for its backward_input.
#include <cstdint>
#include <string>
#include <vector>

namespace titan::parallel {

enum class PipelineOp : uint8_t {
  forward,
  backward,         // input and weight gradients together
  backward_input,   // B of a zero-bubble schedule: what the previous stage waits for
  backward_weight,  // W: the weight gradients, free to fill a bubble once its B has run
};

struct PipelineStep {
  PipelineOp op = PipelineOp::forward;
  int64_t micro = 0;
  int64_t stage = 0;
};

// Which rank holds which stage. loop: stage s on rank s % ranks (one stage per rank, or
// Megatron's interleaving). v: rank r holds stages r and 2*ranks-1-r, so the last stage sits on
// rank 0 next to the first and both turns of the V stay on one rank (ZB-V).
enum class StagePlacement : uint8_t { loop, v };

struct PipelineSchedule {
  std::string name;  // as parallelism.pipeline_parallel_schedule names it
  int64_t ranks = 1;
  int64_t micro_batches = 1;
  int64_t stages_per_rank = 1;
  StagePlacement placement = StagePlacement::loop;
  std::vector<std::vector<PipelineStep>> steps = {};  // per rank, in the order that rank runs them

  int64_t num_stages() const;
  int64_t rank_of_stage(int64_t stage) const;
  std::vector<int64_t> stages_of_rank(int64_t rank) const;  // ascending
  bool splits_backward() const;                             // uses backward_input / backward_weight
};

// "GPipe", "1F1B", "Interleaved1F1B" (Megatron's, stages_per_rank >= 2), "ZBH1" (1F1B's forwards
// and input gradients, weight gradients filling the bubbles), "ZBVZeroBubble" (V placement, two
// stages per rank). Throws titan::Error naming the config key when the layout cannot be run.
PipelineSchedule make_schedule(const std::string& name, int64_t ranks, int64_t micro_batches,
                               int64_t stages_per_rank = 1);

// Throws, naming the rank, step index and what it waits for, unless every (micro, stage) has one
// forward and either one backward or a backward_input followed by its backward_weight, each on
// the rank holding the stage, and the table runs to the end under the semantics above.
void validate_schedule(const PipelineSchedule& s);

// "F3.1" is the forward of micro-batch 3 on stage 1 (B backward, I backward_input, W
// backward_weight, "." idle); one row per rank, one column per time slot when every step takes
// one slot.
std::string format_schedule(const PipelineSchedule& s);

// Timing of the table with a stage's forward costing f, its backward_input b, its backward_weight
// w and a whole backward b + w; communication free. bubble_fraction = 1 - mean(busy) / makespan.
struct ScheduleTiming {
  double makespan = 0;
  std::vector<double> busy = {};  // per rank
  double bubble_fraction = 0;
};
ScheduleTiming simulate_schedule(const PipelineSchedule& s, double f = 1, double b = 1, double w = 1);

// The published bubble fraction of this schedule and layout at f = b = w = 1, and its formula.
// The zero-bubble ones assume micro_batches >= ranks; with fewer, the tables idle more.
struct AnalyticalBubble {
  double fraction = 0;
  std::string formula = {};
};
AnalyticalBubble analytical_bubble(const PipelineSchedule& s);

// Per rank, the most (micro-batch, stage) activations held at once: forwards run whose backward
// (or backward_input, after which only W's small inputs remain) has not. With one stage per rank
// this is micro-batches in flight; with two, a unit is half a rank's layers.
std::vector<int64_t> peak_in_flight(const PipelineSchedule& s);

// One line for a log: the schedule, its layout, the simulated and published bubble fractions and
// the activations each rank holds at most.
std::string describe_schedule(const PipelineSchedule& s);

}  // namespace titan::parallel
