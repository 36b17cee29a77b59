#include "titan/rl/trained_model.h"

#include "titan/checkpoint/checkpoint.h"
#include "titan/models/registry.h"
#include "titan/train/checkpoint_manager.h"

namespace titan::rl {

namespace fs = std::filesystem;

fs::path resolve_checkpoint(const fs::path& path) {
  TITAN_CHECK(fs::exists(path), "checkpoint ", path.string(),
              " does not exist; pass a checkpoint folder (job.dump_folder/checkpoint.folder of a run with "
              "checkpoint.enable = true) or one of its step-<N> folders");
  if (fs::exists(path / checkpoint::kMetadataFile)) return path;
  TITAN_CHECK(fs::is_directory(path), "checkpoint ", path.string(),
              " is a file; pass a checkpoint folder or one of its step-<N> folders");
  const auto found = train::CheckpointManager::list(path);
  TITAN_CHECK(!found.empty(), "checkpoint folder ", path.string(),
              " holds no complete checkpoint (a step-<N> ", "folder with ", checkpoint::kMetadataFile,
              "); train with checkpoint.enable = true into it first, or pass another folder");
  return found.rbegin()->second;
}

TrainedModel load_trained_model(const fs::path& path) {
  TrainedModel t;
  t.dir = resolve_checkpoint(path);
  checkpoint::Reader reader(t.dir);
  const auto& state = reader.metadata().state;
  const std::string where = (t.dir / checkpoint::kMetadataFile).string();
  TITAN_CHECK(state.contains("config"), "checkpoint ", t.dir.string(), ": ", where,
              " holds no job config (state.config), so the model it holds is unknown; it was not saved by "
              "titan train");
  t.config = train::job_config_from_json(state["config"], where + " (state.config)");
  const models::TrainSpec& spec = models::get_train_spec(t.config.model.name);
  // Initialised, then overwritten: the registry builds models with their weights set.
  Generator gen(static_cast<uint64_t>(t.config.training.seed));
  t.model = spec.build(t.config.model, t.config.training.seq_len, gen);
  train::CheckpointManager::load_model(reader, *t.model);
  return t;
}

}  // namespace titan::rl
