#pragma once
// A dataset as a config names it: the [training] section's data keys (and any other section that
// reads a dataset of its own, as [validation] does).
#include <string>

#include "titan/core/config_schema.h"
#include "titan/data/dataset.h"

namespace titan::data {

struct DatasetConfig {
  std::string dataset = "kjv";  // a built-in dataset, or a path
  std::string dataset_path = {};  // overrides `dataset` with a path
  std::string dataset_field = "text";
  std::string dataset_split = "blank_line";
  std::string bad_data = "error";

  // What load_dataset reads: dataset_path when given, else the bundled corpus for "kjv" (found in
  // the working directory, else the source tree), else `dataset` read as a path. `section` names
  // the keys in messages ("training").
  DatasetOptions options(const std::string& section) const;
};

void declare_keys(config::Keys<DatasetConfig>& keys);

}  // namespace titan::data
