#include "support/small_run.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_util.h"

namespace titan::train {

namespace fs = std::filesystem;

JobConfig small_config(const std::vector<std::string>& overrides, const std::string& base) {
  fs::path dir = test::temp_dir("trainer_test");
  fs::path text = dir / "corpus.txt";
  if (!fs::exists(text)) {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i) f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
  }
  std::vector<std::string> o = {"--training.dataset_path=" + text.string(), "--training.seq_len=32",
                                "--training.local_batch_size=4", "--training.steps=4",
                                "--lr_scheduler.warmup_steps=1", "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11",
                                "--job.dump_folder=" + (dir / "out").string(),
                                // Every run starts afresh: none resumes from the one before.
                                "--checkpoint.enable=false"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/" + base, o);
}

TrainResult run(const JobConfig& cfg) {
  std::ostringstream log;
  Trainer t(cfg, log);
  return t.train();
}

}  // namespace titan::train
