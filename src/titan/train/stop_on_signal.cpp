#include "titan/train/stop_on_signal.h"

#include <atomic>
#include <csignal>
#include <cstdlib>

namespace titan::train {

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signals{0};

extern "C" void on_signal(int sig) {
  // The first signal asks for a clean stop after the current step; a second one means "now".
  if (g_signals.fetch_add(1) > 0) std::_Exit(128 + sig);
  g_stop.store(true);
}

}  // namespace

StopOnSignal::StopOnSignal() {
  reset();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}
StopOnSignal::~StopOnSignal() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  reset();
}
bool StopOnSignal::requested() {
  return g_stop.load();
}
void StopOnSignal::request() {
  g_stop.store(true);
}
void StopOnSignal::reset() {
  g_stop.store(false);
  g_signals.store(0);
}

}  // namespace titan::train
