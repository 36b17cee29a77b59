#include "titan/train/config/validation_config.h"

namespace titan::train {

data::DatasetOptions ValidationConfig::dataset_options(const data::DatasetConfig& training) const {
  data::DatasetConfig d = training;
  d.dataset = dataset;
  d.dataset_path = dataset_path;
  return d.options("validation");
}

void declare_keys(config::Keys<ValidationConfig>& keys) {
  using C = ValidationConfig;
  keys.add("enable", &C::enable, {}, "compute the validation loss and perplexity during training")
      .add("dataset", &C::dataset, config::non_empty(),
           "a built-in dataset (kjv: the bundled corpus), or a path as dataset_path takes; with dataset_path "
           "set, the data's name in the log")
      .add("dataset_path", &C::dataset_path, {},
           "as training.dataset_path, read with [training]'s dataset_field, dataset_split and bad_data; "
           "empty: the dataset's own")
      .add("local_batch_size", &C::local_batch_size, config::positive(),
           "sequences per rank per validation batch")
      .add("seq_len", &C::seq_len, config::or_minus_one(config::positive()),
           "tokens per validation sequence; at most training.seq_len, the positions the model is built for; "
           "-1: training.seq_len")
      .add("freq", &C::freq, config::positive(), "validate after every this many steps, and after the last")
      .add("steps", &C::steps, config::or_minus_one(config::positive()),
           "validation batches (local_batch_size sequences on each rank) per validation; -1: the whole "
           "validation set once");
}

}  // namespace titan::train
