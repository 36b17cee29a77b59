#include "titan/train/config/metrics_config.h"

namespace titan::train {

void declare_keys(config::Keys<MetricsConfig>& keys) {
  using C = MetricsConfig;
  keys.add("log_freq", &C::log_freq, config::positive(), "log every this many steps")
      .add("enable_tensorboard", &C::enable_tensorboard, {}, "write TensorBoard event files")
      .add("save_tb_folder", &C::save_tb_folder, config::non_empty(), "TensorBoard folder, under job.dump_folder")
      .add("enable_jsonl", &C::enable_jsonl, {}, "append each logged step to metrics.jsonl under job.dump_folder")
      .add("save_for_all_ranks", &C::save_for_all_ranks, {},
           "every rank writes its own metrics (metrics_rank<r>.jsonl, TensorBoard under rank_<r>), not rank 0 "
           "only")
      .add("disable_color_printing", &C::disable_color_printing, {},
           "plain console lines; else the metrics line is coloured when the console is a terminal")
      .add("peak_flops", &C::peak_flops, config::non_negative(),
           "peak FLOP/s per device for MFU; 0: measured on this machine");
}

}  // namespace titan::train
