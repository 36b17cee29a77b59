#include "titan/train/profiling_config.h"

namespace titan::train {

void declare_keys(config::Keys<ProfilingConfig>& keys) {
  using C = ProfilingConfig;
  keys.add("enable_profiling", &C::enable_profiling, {}, "write traces")
      .add("save_traces_folder", &C::save_traces_folder, config::non_empty(), "trace folder, under job.dump_folder")
      .add("profile_freq", &C::profile_freq, config::positive(), "trace one step in this many");
}

}  // namespace titan::train
