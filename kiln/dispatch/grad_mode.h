// Grad mode: whether eager ops record autograd history on this thread (torch.no_grad()).
#pragma once

namespace kiln {

/// Whether eager ops record autograd nodes (thread-local). See NoGradGuard.
bool grad_mode_enabled();
void set_grad_mode(bool on);

/// Disables autograd recording in a scope (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(false); }
  ~NoGradGuard() { set_grad_mode(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};
/// Re-enables recording in a scope.
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(true); }
  ~EnableGradGuard() { set_grad_mode(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
