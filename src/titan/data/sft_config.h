#pragma once
// The [sft] section: how supervised fine-tuning (training.objective = "sft") reads its
// prompt/completion data (data/sft_dataset.h reads it).
#include <string>

#include "titan/core/config_schema.h"

namespace titan::data {

struct SftConfig {
  std::string prompt_field = "prompt";
  std::string completion_field = "completion";
  // An example longer than a row (training.seq_len tokens): cut to the row (its completion's end
  // is lost), skipped and counted, or an error naming its file and line.
  std::string over_length = "truncate";
  // Off: one example per row, the rest padding.
  bool packing = true;
};

void declare_keys(config::Keys<SftConfig>& keys);

}  // namespace titan::data
