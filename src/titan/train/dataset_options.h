#pragma once
// What a config section's dataset keys name, for data::load_dataset: [training]'s, and
// [validation]'s, which reads its own dataset in [training]'s format.
#include <string>

#include "titan/data/dataset.h"
#include "titan/train/job_config.h"

namespace titan::train {

// dataset_path when given, else the bundled corpus for "kjv" (found in the working directory or
// the source tree), else `dataset` read as a path; the format (JSONL field, document split, bad
// data) from `format`. `section` names the keys in errors.
data::DatasetOptions dataset_options(const std::string& section, const std::string& dataset,
                                     const std::string& dataset_path, const JobConfig::Training& format);

}  // namespace titan::train
