#pragma once
// A clean stop on SIGINT/SIGTERM: the trainer finishes the step in flight, saves a checkpoint and
// returns.

namespace titan::train {

// Installs SIGINT/SIGTERM handlers that ask the running trainer to stop after its current step
// (a second signal exits at once), and restores the default handlers when destroyed, forgetting
// a stop it was asked for (so that a later run in the same process starts unstopped).
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  static bool requested();
  static void request();  // as if a signal had arrived (tests)
  static void reset();
};

}  // namespace titan::train
