#pragma once
// When the trainer saves and what it restores, per the [checkpoint] config. Checkpoints are
// checkpoint::save directories <job.dump_folder>/<checkpoint.folder>/step-<N>. A full one holds
//   tensors  "model.<name>" for every entry of the model's state dict, and
//            "optimizer.<param>.exp_avg|exp_avg_sq|step" for AdamW's,
//   state    {"step", "model_only": false, "rng": {"seed", "offset"},
//             "data": {"epoch", "index", "windows"}, "lr_scheduler": {"step"},
//             "config": the resolved job config as JSON}
// and resuming from it continues bit for bit as if the run had never stopped. With
// last_save_model_only, the final save holds the model's tensors only, in export_dtype, with
// "model_only": true: an export for inference or for initial_load_path, not for resuming. With
// last_save_in_hf as well, that final step-<N> is a Hugging Face folder instead (config.json +
// model.safetensors, HF's names and layouts; train/hf_interop.h), and initial_load_path may name
// such a folder, to start training from HF weights.
#include <cstdint>
#include <filesystem>
#include <future>
#include <iosfwd>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "titan/checkpoint/checkpoint.h"
#include "titan/core/file_lock.h"
#include "titan/core/rng.h"
#include "titan/data/loader.h"
#include "titan/models/registry.h"
#include "titan/nn/module.h"
#include "titan/optim/adamw.h"
#include "titan/optim/lr_scheduler.h"
#include "titan/parallel/fully_shard.h"
#include "titan/parallel/parameter_slices.h"
#include "titan/parallel/pipeline_parallel.h"
#include "titan/train/config/job_config.h"

namespace titan::train {

// What a checkpoint restores; these outlive the manager.
struct Checkpointed {
  nn::Module& model;
  optim::AdamW& optimizer;
  optim::LrScheduler& scheduler;
  data::DataLoader* loader;  // null where the step draws no batches from a loader (GRPO)
  Generator& rng;
  // Under FSDP the model's parameters live in its shards, and so do the optimizer's moments.
  parallel::FullyShard* fsdp = nullptr;
  // The plans that split parameters over a group (tensor, expert parallelism): each rank holds its
  // slice of those (and FSDP, when on too, shards that slice); the ones a plan leaves whole are
  // saved by its group's rank 0.
  std::vector<const parallel::ParameterSlices*> slices = {};
  // Under pipeline parallelism each rank holds its stages' tensors only.
  parallel::PipelineParallel* pp = nullptr;
  // Whether this rank's split or sharded tensors are the ones saved: true on the first
  // data-parallel replica, whose copies the others hold too.
  bool replica_writer = true;
  // The folder of the run's tokenizer.json (empty: the byte tokenizer, which has no file): a
  // Hugging Face export carries its files, so that the folder is whole for titan generate.
  std::filesystem::path tokenizer_dir;
};

// The lock file in a checkpoint folder that a run holds (FolderLock) for its lifetime.
inline constexpr const char* kRunLockFile = "titan-train.lock";

class CheckpointManager {
 public:
  // With checkpointing enabled, every rank that saves creates the folder and checks that it is
  // writable, and rank 0 locks it (kRunLockFile) until destroyed: a second run into the same
  // folder is refused, naming the pid and host of the first. Every rank of `world` loads. Under
  // DDP every rank holds the same state, so rank 0 alone saves it; under FSDP or tensor parallelism
  // every rank of the first replica saves its shards, together (checkpoint::save_collective), in the
  // foreground. Rank 0 alone tidies the folder.
  CheckpointManager(const JobConfig& cfg, Checkpointed parts, std::ostream& log,
                    dist::ProcessGroup world = dist::ProcessGroup::single());
  // Waits for a save in the background; a failure of it is logged, since it cannot be thrown.
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // With checkpointing enabled, restores the parts from checkpoint.load_step when set, else
  // from the latest complete full checkpoint in the folder, else from initial_load_path (the
  // model alone with initial_load_model_only; an HF folder's config.json must describe this
  // run's model). Returns the step training continues after: 0 for a fresh start or a
  // model-only load. Removes what killed saves left behind.
  int64_t load();

  // Called after every optimizer step (and the LR schedule's): saves when `step` is a multiple
  // of checkpoint.interval, the last step, or `stopping` (a clean stop on a signal), so that a
  // stopped run resumes where it stopped. In async mode the state is copied before this
  // returns and written in the background; a save still running is waited for first.
  void after_step(int64_t step, bool stopping = false);
  // Whether after_step(step, stopping) saves on this rank.
  bool saves_after(int64_t step, bool stopping) const;
  // Whether a checkpoint is due after `step` on any rank: the same on every rank of a run.
  bool due_after(int64_t step, bool stopping) const;

  // Waits for a background save, throwing its error.
  void wait();

  const std::filesystem::path& folder() const { return folder_; }
  // The complete checkpoints of `folder` (step-<N> holding metadata.json, or config.json for a
  // Hugging Face export) by step.
  static std::map<int64_t, std::filesystem::path> list(const std::filesystem::path& folder);
  // Loads the model's tensors ("model.<name>") of the checkpoint `reader` opened, full or
  // model-only, cast from the dtype they were saved in, into `model`, as a model-only restore
  // does (for inference, not to resume training).
  static void load_model(checkpoint::Reader& reader, nn::Module& model);

 private:
  void save(int64_t step, bool model_only);
  // Pieces of `state`'s tensors (by state-dict name; `optimizer` keys are "<param>.<what>")
  // under prefix + name: whole, or under FSDP this rank's rows of a parameter or its moments.
  // For a save, only those this rank writes: rank 0 the whole ones, the first replica's ranks
  // their rows.
  // Where this rank's tensor `t` of parameter `param` (or optimizer state shaped like it) sits in
  // the whole one, composing a plan's slice with FSDP's rows; nullopt for a tensor every rank
  // holds whole.
  struct Box {
    Tensor data;  // the rows of t that hold values (FSDP pads the last shards)
    Shape offsets;
    Shape global_shape;
    bool saves = false;  // whether this rank writes it (one copy of each piece is saved)
  };
  std::optional<Box> box_of(const std::string& param, const Tensor& t) const;
  bool sharded() const { return parts_.fsdp != nullptr || !parts_.slices.empty() || parts_.pp != nullptr; }
  void add_pieces(checkpoint::Pieces& out, const std::string& prefix,
                  const std::map<std::string, Tensor>& state, bool optimizer, bool saving) const;
  // Copies a whole state dict (an HF import) into the model, or into its shards under FSDP.
  void load_whole_model_state(const nn::StateDict& state);
  // Loads checkpoint `dir` into the parts; returns its step, or 0 when only the model is loaded.
  int64_t restore(const std::filesystem::path& dir, bool model_only);
  // Loads the weights of Hugging Face folder `dir` into the model, after checking that its
  // config.json describes this run's model.
  void restore_hf(const std::filesystem::path& dir);
  // Moves step folder `dir` aside (to <dir>.incomplete-<UTC time>, saying so) when it exists
  // without being a complete checkpoint, so that saving its step loses nothing of it.
  void set_aside_incomplete(const std::filesystem::path& dir) const;
  // Deletes all but the newest keep_latest_k checkpoints, never the one just saved at `saved`.
  void purge(int64_t saved) const;

  const JobConfig& cfg_;
  Checkpointed parts_;
  std::ostream& log_;
  std::filesystem::path folder_;
  DType export_dtype_ = kF32;
  dist::ProcessGroup world_;
  bool writer_;  // world rank 0
  // With last_save_in_hf: the model family's adapter and the final save's config.json.
  const models::StateDictAdapter* hf_adapter_ = nullptr;
  nlohmann::json hf_config_;
  // Released after a background save has ended (members are destroyed after ~CheckpointManager).
  std::optional<FolderLock> lock_;
  int64_t last_saved_ = -1;
  std::future<void> pending_;
};

}  // namespace titan::train
