#pragma once

namespace titan::autograd {

// Whether ops record the tape on this thread (on by default).
bool grad_enabled();
void set_grad_enabled(bool on);

// Scoped: grad mode is `on` inside, and what it was before after.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool on) : prev_(grad_enabled()) { set_grad_enabled(on); }
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

// Scoped: ops inside record nothing (optimizer updates, evaluation, weight init).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace titan::autograd
