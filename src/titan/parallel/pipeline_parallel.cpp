#include "titan/parallel/pipeline_parallel.h"

#include <algorithm>

#include "titan/core/in_place.h"

namespace titan::parallel {

std::vector<StageSpan> split_layers(int64_t n_layers, int64_t num_stages, const std::vector<std::string>& split_points) {
  TITAN_CHECK(num_stages >= 1, "pipeline parallelism: ", num_stages, " stages");
  std::vector<int64_t> starts{0};
  if (split_points.empty()) {
    TITAN_CHECK(n_layers >= num_stages, "pipeline parallelism: ", num_stages, " stages need at least ", num_stages,
                " layers, the model has ", n_layers,
                "; lower parallelism.pipeline_parallel_degree (or the virtual stages of the schedule)");
    for (int64_t s = 0; s < num_stages - 1; ++s)
      starts.push_back(starts.back() + n_layers / num_stages + (s < n_layers % num_stages ? 1 : 0));
  } else {
    TITAN_CHECK(static_cast<int64_t>(split_points.size()) == num_stages - 1,
                "parallelism.pipeline_parallel_split_points: ", split_points.size(), " split points make ",
                split_points.size() + 1, " stages, but the layout has ", num_stages,
                " (pipeline_parallel_degree times the schedule's stages per rank); give ", num_stages - 1);
    for (const std::string& point : split_points) {
      const std::string prefix = "layers.";
      int64_t layer = -1;
      if (point.starts_with(prefix) && point.size() > prefix.size() &&
          std::all_of(point.begin() + static_cast<long>(prefix.size()), point.end(), ::isdigit))
        layer = std::stoll(point.substr(prefix.size()));
      TITAN_CHECK(layer > starts.back() && layer < n_layers, "parallelism.pipeline_parallel_split_points: \"", point,
                  "\" is not a layer \"layers.<i>\" after the previous split point (layer ", starts.back(),
                  ") and before the model's last layer (", n_layers - 1,
                  "); split points name the first layer of each stage after the first, in order");
      starts.push_back(layer);
    }
  }
  std::vector<StageSpan> spans;
  for (size_t s = 0; s < starts.size(); ++s)
    spans.push_back({starts[s], s + 1 < starts.size() ? starts[s + 1] : n_layers});
  return spans;
}

int64_t stages_per_rank(const std::string& schedule, int64_t ranks, size_t split_points) {
  const int64_t stages = static_cast<int64_t>(split_points) + 1;
  const bool interleaved = schedule == "Interleaved1F1B";
  const int64_t per_rank = interleaved ? (split_points == 0 ? 2 : stages / ranks) : schedule == "ZBVZeroBubble" ? 2 : 1;
  TITAN_CHECK(split_points == 0 || stages == per_rank * ranks, "parallelism.pipeline_parallel_split_points: ",
              split_points, " split points make ", stages, " stages, which schedule \"", schedule, "\" cannot spread over ",
              ranks, " pipeline ranks; give ", interleaved ? "a multiple of the degree, less one" : std::to_string(per_rank * ranks - 1),
              " split points");
  return per_rank;
}

PipelineLayout pipeline_layout(const std::string& schedule, int64_t ranks, int64_t micro_batches,
                               int64_t n_layers, const std::vector<std::string>& split_points) {
  const int64_t per_rank = stages_per_rank(schedule, ranks, split_points.size());
  return {.schedule = make_schedule(schedule, ranks, micro_batches, per_rank),
          .spans = split_layers(n_layers, ranks * per_rank, split_points)};
}

PipelineParallel::PipelineParallel(nn::Module& root, PipelineSchedule schedule, std::vector<StageSpan> spans,
                                   dist::ProcessGroup group, std::string layers_prefix)
    : root_(root),
      schedule_(std::move(schedule)),
      spans_(std::move(spans)),
      group_(std::move(group)),
      layers_prefix_(std::move(layers_prefix)) {
  TITAN_CHECK(static_cast<int64_t>(spans_.size()) == schedule_.num_stages(), "pipeline parallelism: ",
              spans_.size(), " stage spans for a schedule of ", schedule_.num_stages(), " stages");
  TITAN_CHECK(schedule_.ranks == group_.size(), "pipeline parallelism: a schedule for ", schedule_.ranks,
              " ranks over a pp group of ", group_.size());
  local_stages_ = schedule_.stages_of_rank(group_.rank());
}

void PipelineParallel::place(const std::string& prefix, int64_t stage) {
  TITAN_CHECK(stage >= 0 && stage < schedule_.num_stages(), "pipeline parallelism: ", prefix, " placed on stage ",
              stage, " of ", schedule_.num_stages());
  placements_.emplace_back(prefix, stage);
}

int64_t PipelineParallel::stage_of(const std::string& name) const {
  const std::string layers = layers_prefix_ + ".";
  if (name.starts_with(layers)) {
    const int64_t layer = std::stoll(name.substr(layers.size()));
    for (size_t s = 0; s < spans_.size(); ++s)
      if (layer >= spans_[s].first && layer < spans_[s].last) return static_cast<int64_t>(s);
  }
  for (const auto& [prefix, stage] : placements_)
    if (name == prefix || name.starts_with(prefix + ".")) return stage;
  throw Error("pipeline parallelism: parameter " + name +
              " belongs to no stage (neither a layer nor a module the model's plan placed); its family's "
              "parallelize must place it");
}

bool PipelineParallel::holds(const std::string& name) const {
  return schedule_.rank_of_stage(stage_of(name)) == group_.rank();
}

void PipelineParallel::apply() {
  for (const auto& [name, p] : root_.named_parameters()) {
    if (holds(name) || p.dim() == 0) continue;
    emptied_[name] = p.sizes();
    narrow_in_place(p, 0, 0, 0);
  }
}

std::optional<GlobalSlice> PipelineParallel::slice_of(const std::string& name) const {
  auto it = emptied_.find(name);
  if (it == emptied_.end()) return std::nullopt;
  return GlobalSlice{.global_shape = it->second, .offsets = Shape(it->second.size(), 0)};
}

}  // namespace titan::parallel
