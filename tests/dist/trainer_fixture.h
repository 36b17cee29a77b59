#pragma once
// What the distributed trainer tests share: a small job over a tiny corpus, in folders of this
// job's own, so that two runs of the suite at once (or a leftover of an earlier one) never meet.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "titan/models/llama3/model_args.h"
#include "titan/train/config/job_config.h"
#include "titan/train/trainer.h"

namespace titan::train::testing {

inline constexpr int64_t kGlobalBatch = 8;
inline constexpr int64_t kSteps = 10;

// A folder of this job (named by rank 0's process id, which main() hands every rank) for
// `rank`: the folder rank 0 writes is the one every rank reads checkpoints from.
std::filesystem::path job_dir(int rank);

// The llama3 debug config shrunk to a few seconds a run, with `overrides` last; the corpus and
// dump folder are this rank's.
JobConfig small_config(const std::vector<std::string>& overrides,
                       const std::string& config = "configs/llama3/debug.toml");

// A two-layer Llama 3 of width 64 over 96 ids and 16 positions: FSDP's units in a second.
models::llama3::ModelArgs tiny_llama3_args();

// The message of the titan::Error that `f` throws, or "(no error)".
std::string error_of(const std::function<void()>& f);

// "--training.local_batch_size=" for kGlobalBatch over `ranks` data-parallel ranks.
std::string local_batch(int64_t ranks);

// What rank 0 computes training alone on the global batch with `overrides` (local_batch(1) added),
// handed to every rank: per step the loss and gradient norm, and each validation pass's loss.
struct OneRankReference {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<double> validation_losses;
};
OneRankReference one_rank_reference(const std::vector<std::string>& overrides, const std::string& config);
// The same for any job: rank 0 trains `cfg` alone (its world one process), every rank gets the figures.
OneRankReference one_rank_run(const JobConfig& cfg);

// a followed by b.
std::vector<std::string> join(std::vector<std::string> a, const std::vector<std::string>& b);

// A run saved under one layout and resumed under another: checkpoints at steps 5 and 10 into a
// folder of this job named `name`; a resumed run loads step 5 and trains 6 to 10 again.
struct ResumeAcrossLayouts {
  explicit ResumeAcrossLayouts(const std::string& name);
  std::filesystem::path dir;
  std::vector<std::string> save;    // the checkpoint keys
  std::vector<std::string> resume;  // save's, loading step 5
  // Empties the folder, between barriers of the world.
  void fresh() const;
  // Rank 0 alone trains `overrides` on the global batch; every rank returns after it.
  TrainResult one_rank(const std::vector<std::string>& overrides, const std::string& config) const;
  // Expects `r` resumed after step 5 with want's losses of steps 6 to 10, naming `what`.
  static void expect_second_half(const TrainResult& r, const OneRankReference& want, const std::string& what);
};

// Expects `got`'s losses within 1e-5 and gradient norms within 1e-4 (relative) of `want`'s at
// every step, naming `what`; returns the largest relative loss difference.
double expect_one_rank_figures(const TrainResult& got, const OneRankReference& want, const std::string& what);
// The same for the validation losses (within 1e-5); returns the largest relative difference.
double expect_one_rank_validation(const TrainResult& got, const OneRankReference& want, const std::string& what);

// The largest elementwise difference of a and b over a's largest magnitude.
double relative_difference(const Tensor& a, const Tensor& b);

}  // namespace titan::train::testing
