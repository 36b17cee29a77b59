#pragma once
// The [validation] section, TorchTitan's keys and defaults (dataset "kjv" where TorchTitan has
// c4_validation).
#include <cstdint>
#include <string>

#include "titan/core/config_schema.h"
#include "titan/data/dataset_config.h"

namespace titan::train {

struct ValidationConfig {
  bool enable = false;
  // As training.dataset and training.dataset_path; the format keys (dataset_field,
  // dataset_split, bad_data) are [training]'s.
  std::string dataset = "kjv";
  std::string dataset_path = {};
  int64_t local_batch_size = 8;
  // -1: training.seq_len, as TorchTitan's validator takes the training length when none is given.
  int64_t seq_len = -1;
  int64_t freq = 10;   // validate after every freq-th step, and after the last
  int64_t steps = -1;  // batches per validation; -1: the whole validation set once

  // The tokens per validation sequence: seq_len, or training's when it is -1.
  int64_t seq_len_with(int64_t training_seq_len) const { return seq_len == -1 ? training_seq_len : seq_len; }

  // The validation set, read in the format `training` gives.
  data::DatasetOptions dataset_options(const data::DatasetConfig& training) const;
};

void declare_keys(config::Keys<ValidationConfig>& keys);

}  // namespace titan::train
