// The `titan` command. Subcommands: train, generate, tokenizer, tokenize, convert, flux. The benchmarks
// are programs of their own (bench/, build/bench/bench_*).
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "titan/apps/convert_command.h"
#include "titan/apps/flux_command.h"
#include "titan/apps/generate_command.h"
#include "titan/apps/tokenize_command.h"
#include "titan/apps/tokenizer_command.h"
#include "titan/core/error.h"
#include "titan/dist/process_group.h"
#include "titan/rl/grpo_engine.h"
#include "titan/train/config/job_config.h"
#include "titan/train/trainer.h"

namespace {

// A clean stop on a signal, checkpoint saved: sysexits.h's EX_TEMPFAIL ("try again later"), so
// that a scheduler tells it from a finished run (0) and from a kill by a second signal (128+N).
constexpr int kInterruptedExit = 75;

constexpr const char* kUsage =
    "usage: titan train --config FILE [--section.key=value ...] [--print-config] [--print-schedule]\n"
    "                   [--dry-run=RANKS[:RANK]]\n"
    "  --config FILE      a TOML job config (see configs/)\n"
    "  --section.key=V    overrides one key of the config, e.g. --training.steps=100\n"
    "  --print-config     prints the resolved config as TOML and exits\n"
    "  --print-schedule   prints the pipeline schedule's table (a row per pp rank, a column per time\n"
    "                     slot: F forward, B backward, I input and W weight gradients), its bubble, and exits\n"
    "  --dry-run=N[:R]    builds rank R (default 0) of a job of N ranks as [parallelism] lays it out\n"
    "                     (mesh, model on meta, plans), without launching the others, reading data or\n"
    "                     allocating the model; prints that rank's memory plan, checks it against this\n"
    "                     machine's memory as training does (training.memory_check) and exits\n"
    "  exit status: 0 when training.steps are done; 75 when SIGINT/SIGTERM stopped the run after\n"
    "  a step and saved a checkpoint there (run the same command again to resume); 1 on an error;\n"
    "  128+N when a second signal N ended it at once, without a checkpoint\n"
    "       titan generate --checkpoint PATH --prompt TEXT ...   (titan generate --help)\n"
    "       titan generate --pipeline DIR --prompt TEXT --out IMAGE.png   FLUX images\n"
    "       titan tokenizer encode|decode|train ...   (titan tokenizer --help)\n"
    "       titan tokenize --out DIR INPUT...         corpus to token shards (titan tokenize --help)\n"
    "       titan convert --to hf|titan ...           Hugging Face import/export (titan convert --help)\n"
    "       titan flux encode ...                     FLUX's encoding cache (titan flux --help)\n";

int train(const std::vector<std::string>& args) {
  // A log redirected to a file (SLURM, nohup) gets each line when it is written, as a terminal
  // does, so that a run killed for memory leaves every line it printed on disk.
  if (!isatty(STDOUT_FILENO)) setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  std::string config;
  bool print = false, print_schedule = false;
  int dry_ranks = 0, dry_rank = 0;  // 0 ranks: no dry run
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--config" || a == "--job.config_file") {
      TITAN_CHECK(i + 1 < args.size(), "titan train: ", a, " needs a file name");
      config = args[++i];
    } else if (a.starts_with("--config=")) {
      config = a.substr(9);
    } else if (a == "--print-config") {
      print = true;
    } else if (a == "--print-schedule") {
      print_schedule = true;
    } else if (a.starts_with("--dry-run=")) {
      const std::string v = a.substr(10);
      const size_t colon = v.find(':');
      try {
        size_t used = 0;
        dry_ranks = std::stoi(v.substr(0, colon), &used);
        TITAN_CHECK(used == (colon == std::string::npos ? v.size() : colon), "trailing characters");
        if (colon != std::string::npos) dry_rank = std::stoi(v.substr(colon + 1), &used);
        TITAN_CHECK(colon == std::string::npos || used == v.size() - colon - 1, "trailing characters");
      } catch (const std::exception&) {
        TITAN_CHECK(false, "titan train: ", a,
                    ": expected --dry-run=RANKS or --dry-run=RANKS:RANK, whole numbers");
      }
      TITAN_CHECK(dry_ranks >= 1 && dry_rank >= 0 && dry_rank < dry_ranks, "titan train: ", a, ": rank ",
                  dry_rank, " is not one of ", dry_ranks, " ranks");
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else {
      overrides.push_back(a);
    }
  }
  TITAN_CHECK(!config.empty(), "titan train: no --config given\n", kUsage);
  titan::train::JobConfig cfg = titan::train::load_job_config(config, overrides);
  if (print) {
    std::cout << titan::train::to_toml(cfg);
    return 0;
  }
  if (print_schedule) {
    titan::train::print_pipeline_schedule(cfg, std::cout);
    return 0;
  }
  if (dry_ranks > 0) {
    titan::train::dry_run(cfg, dry_ranks, dry_rank, std::cout);
    return 0;
  }
  titan::train::StopOnSignal stop_on_signal;
  titan::train::Trainer trainer(cfg, std::cout, titan::dist::world(), titan::rl::objective_engine(cfg));
  titan::train::TrainResult r = trainer.train();
  const int status = r.interrupted ? kInterruptedExit : 0;
  if (titan::dist::world().rank() != 0) return status;
  std::cout << "titan: " << r.steps_run << " steps";
  // A finished run started again (make train twice) resumes at its end and runs no step.
  if (r.losses.empty())
    std::cout << ", none run now";
  else
    std::cout << ", final loss " << r.losses.back();
  if (r.interrupted)
    std::cout << " (interrupted; exit status " << kInterruptedExit << ", run again to resume)";
  std::cout << "\n";
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  try {
    std::string cmd = args[0];
    args.erase(args.begin());
    if (cmd == "train") return train(args);
    if (cmd == "generate") return titan::apps::generate_command(args);
    if (cmd == "tokenizer") return titan::apps::tokenizer_command(args);
    if (cmd == "tokenize") return titan::apps::tokenize_command(args);
    if (cmd == "convert") return titan::apps::convert_command(args);
    if (cmd == "flux") return titan::apps::flux_command(args);
    std::cerr << "titan: unknown command '" << cmd << "'\n" << kUsage;
    return 2;
  } catch (...) {
    // Not only titan::Error: a std::bad_alloc or a library's exception that escapes must still
    // end in a message and, under MPI, end the other ranks, never in std::terminate.
    std::string what;
    try {
      throw;
    } catch (const titan::Error& e) {
      what = e.what();
    } catch (const std::bad_alloc&) {
      what =
          "out of memory (std::bad_alloc): an input asked for more memory than there is; a damaged or "
          "hand-edited file can state a size this large";
    } catch (const std::exception& e) {
      what =
          std::string("unexpected ") + e.what() + " (please report: titan should have named what is wrong)";
    } catch (...) {
      what = "an unknown exception (please report: titan should have named what is wrong)";
    }
    // What this rank wrote before goes out first, so that the error is the last thing shown.
    std::cout.flush();
    if (titan::dist::launched_by_mpi()) {
      std::cerr << titan::as_error_line("titan: rank " + std::to_string(titan::dist::launch_rank()) +
                                        ": error: " + what)
                << std::flush;
      // The other ranks may be waiting for this one: end them all now.
      titan::dist::abort_job(1);
    } else {
      std::cerr << titan::as_error_line("titan: error: " + what);
    }
    return 1;
  }
}
