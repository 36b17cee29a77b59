#pragma once
// The data training.objective trains and validates on: causal_lm's documents packed into one
// stream (data/dataset.h), every label carrying loss; sft's prompt/completion examples packed into
// rows of seq_len tokens with a loss mask over their completions (data/sft_dataset.h).
#include <cstdint>
#include <optional>
#include <string>

#include "titan/data/dataset.h"
#include "titan/data/sft_dataset.h"
#include "titan/data/tokenizer.h"
#include "titan/train/config/job_config.h"

namespace titan::train {

struct ObjectiveData {
  data::Dataset dataset;
  std::optional<data::SftStats> sft;  // under sft
};

// `options` names the files ([training]'s or [validation]'s); `seq_len` is the rows' length under sft.
ObjectiveData load_objective_data(const JobConfig& cfg, const data::DatasetOptions& options,
                                  const data::Tokenizer& tokenizer, int64_t seq_len);

// For the log: "objective sft: 300 examples packed into 40 rows of 64 tokens (2 truncated, 1
// skipped), 31.2% of the rows' labels carry loss"; `stats` counts the skips.
std::string describe_objective(const std::string& objective, const std::optional<data::SftStats>& sft,
                               const data::DatasetStats& stats, int64_t seq_len);

}  // namespace titan::train
