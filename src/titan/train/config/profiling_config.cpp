#include "titan/train/config/profiling_config.h"

namespace titan::train {

void declare_keys(config::Keys<ProfilingConfig>& keys) {
  using C = ProfilingConfig;
  keys.add("enable_profiling", &C::enable_profiling, {},
           "trace every profile_freq-th step: ops, backward nodes, GEMMs, collectives, data, optimizer, "
           "checkpoints")
      .add("save_traces_folder", &C::save_traces_folder, config::non_empty(),
           "trace folder, under job.dump_folder: iteration_<step>/rank<r>_trace.json, for ui.perfetto.dev")
      .add("profile_freq", &C::profile_freq, config::positive(),
           "trace the steps divisible by this: profile_freq, 2 * profile_freq, ...; memory snapshots are "
           "written at the same steps")
      .add("enable_memory_snapshot", &C::enable_memory_snapshot, {},
           "record every allocation's owner from the start; write a memory snapshot (JSON) every "
           "profile_freq steps and on out-of-memory; draw one with scripts/memviz.py SNAPSHOT -o out.html")
      .add("save_memory_snapshot_folder", &C::save_memory_snapshot_folder, config::non_empty(),
           "memory snapshot folder, under job.dump_folder");
}

}  // namespace titan::train
