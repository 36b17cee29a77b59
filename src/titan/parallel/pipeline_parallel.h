#pragma once
// Pipeline parallelism over the mesh's pp ranks: the model's layers split into stages of
// consecutive layers, the embedding with the first stage and the final norm and output with the
// last, stage s on rank schedule.rank_of_stage(s) (a rank holds several stages under interleaved
// and V schedules). Applied to a built model from outside its code, like the other plans:
//
// Every parameter outside this rank's stages is narrowed in place to an empty slice of itself
// (zero rows; parallel/deferred_init.h's slice_of says which box of the whole tensor that is,
// the empty one), so names, the module tree and the order in which init draws from the generator
// stay those of the whole model: a rank's stages get exactly the values one rank would give them,
// and a checkpoint saves each parameter from the rank that holds it, under its usual name, which
// any other layout loads. The model runs a stage through CausalLM::run_layers; the schedule's
// table (pipeline_schedule.h) says when, and pipeline_executor.h runs it.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "titan/dist/process_group.h"
#include "titan/nn/module.h"
#include "titan/parallel/deferred_init.h"
#include "titan/parallel/pipeline_schedule.h"

namespace titan::parallel {

// Layers [first, last) of a stage.
struct StageSpan {
  int64_t first = 0;
  int64_t last = 0;
};

// The stages' spans over `n_layers` layers: cut before each of `split_points` ("layers.<i>",
// TorchTitan's pipeline_parallel_split_points), which must give `num_stages` stages; with none,
// as even as the layers allow, the earlier stages taking one more where they do not divide
// (the last stage also runs the output projection and the loss). Throws, naming the key, on a
// split point that is not a layer, out of order, or a stage left without layers.
std::vector<StageSpan> split_layers(int64_t n_layers, int64_t num_stages, const std::vector<std::string>& split_points);

// The stages each rank runs under schedule `name`: one for the single-stage schedules; for
// Interleaved1F1B as many as `split_points` make over `ranks` (two without split points); two
// for ZBVZeroBubble. Throws, naming the keys, when the split points do not fit the schedule.
int64_t stages_per_rank(const std::string& schedule, int64_t ranks, size_t split_points);

// The schedule `schedule` of `micro_batches` over `ranks` pipeline ranks and its stages' spans
// over `n_layers` layers: what training runs and --print-schedule shows, checked as above.
struct PipelineLayout {
  PipelineSchedule schedule;
  std::vector<StageSpan> spans;
};
PipelineLayout pipeline_layout(const std::string& schedule, int64_t ranks, int64_t micro_batches,
                               int64_t n_layers, const std::vector<std::string>& split_points);

class PipelineParallel {
 public:
  // The plan over `group` (mesh[dist::MeshAxis::pp]): stage s runs `spans[s]` on schedule.rank_of_stage(s).
  // Parameters are placed by name: "<layers_prefix>.<i>." goes with the stage of layer i, the
  // modules place() names with their stages. Nothing is narrowed before apply().
  PipelineParallel(nn::Module& root, PipelineSchedule schedule, std::vector<StageSpan> spans,
                   dist::ProcessGroup group, std::string layers_prefix = "layers");

  // Places the parameters under module path `prefix` ("tok_embeddings", "norm") with `stage`.
  void place(const std::string& prefix, int64_t stage);
  // Narrows every parameter this rank's stages do not hold to an empty slice, meta or real. A
  // parameter that no placement covers is refused, naming it. Call after tensor parallelism has
  // split its slices and before FSDP shards them.
  void apply();

  // The stage of parameter `name`.
  int64_t stage_of(const std::string& name) const;
  bool holds(const std::string& name) const;
  // For deferred initialisation and checkpoints: the empty box of a parameter this rank does not
  // hold (of the shape it had before apply(): compose with tensor parallelism's slice first),
  // nullopt for one it holds.
  std::optional<GlobalSlice> slice_of(const std::string& name) const;

  const PipelineSchedule& schedule() const { return schedule_; }
  const std::vector<StageSpan>& spans() const { return spans_; }
  // This rank's stages, ascending.
  const std::vector<int64_t>& local_stages() const { return local_stages_; }
  dist::ProcessGroup& group() { return group_; }
  int64_t num_layers() const { return spans_.empty() ? 0 : spans_.back().last; }

 private:
  nn::Module& root_;
  PipelineSchedule schedule_;
  std::vector<StageSpan> spans_;
  dist::ProcessGroup group_;
  std::string layers_prefix_;
  std::vector<int64_t> local_stages_;
  std::vector<std::pair<std::string, int64_t>> placements_;
  std::map<std::string, Shape> emptied_;  // parameter -> its shape before apply()
};

}  // namespace titan::parallel
