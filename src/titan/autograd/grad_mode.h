#pragma once

namespace titan::autograd {

// Whether ops record the tape on this thread (on by default).
bool grad_enabled();
void set_grad_enabled(bool on);

// Scoped: ops inside record nothing (optimizer updates, evaluation, weight init).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace titan::autograd
