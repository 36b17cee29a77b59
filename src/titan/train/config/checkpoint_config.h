#pragma once
// The [checkpoint] section: saving, resuming and the final export.
#include <cstdint>
#include <string>

#include "titan/core/config_schema.h"

namespace titan::train {

struct CheckpointConfig {
  bool enable = false;
  std::string folder = "checkpoint";  // under job.dump_folder
  int64_t interval = 500;
  std::string initial_load_path = {};
  bool initial_load_model_only = true;
  bool last_save_model_only = true;
  bool last_save_in_hf = false;
  // config.json's layout in that export: "transformers5" or "transformers4".
  std::string hf_config_format = "transformers5";
  std::string export_dtype = "float32";
  std::string async_mode = "disabled";
  int64_t keep_latest_k = 0;  // 0: keep all
  int64_t load_step = -1;     // -1: the latest
};

void declare_keys(config::Keys<CheckpointConfig>& keys);

}  // namespace titan::train
