// The jitted function's non-template side (jit.h): the engine's public face. What a call does
// is the engine's (engine.h); each method here takes the engine's lock where it reads its
// state.
#include "kiln/jit/jit.h"

#include <algorithm>

#include "kiln/jit/engine.h"

namespace kiln::detail::jit_engine {

Engine::Engine(JitOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}
Engine::~Engine() = default;

std::vector<Tensor> Engine::call(const std::vector<Arg>& args, const TraceFn& fn) {
  return impl_->call(args, fn);
}

std::string Engine::explain() const { return impl_->explain(); }
std::string Engine::to_mermaid() const { return impl_->to_mermaid(); }
Engine::Stats Engine::stats() const { return impl_->stats_now(); }

void Engine::check_arg(size_t i, Arg::Kind got, Arg::Kind want) const {
  const bool number = got == Arg::kScalar || got == Arg::kBool;
  const bool wants_number = want == Arg::kScalar || want == Arg::kBool;
  if (got == want || (number && wants_number)) return;
  // A runtime scalar reaches fn as a 0-d tensor.
  const auto& rs = impl_->opts.runtime_scalars;
  if (number && want == Arg::kTensor &&
      std::find(rs.begin(), rs.end(), static_cast<int>(i)) != rs.end())
    return;
  fail("jit", "'", impl_->opts.name, "': argument ", i, " is ", kind_name(got),
       ", but the function's parameter ", i, " takes ", kind_name(want));
}

bool Engine::guards_accept(const std::vector<Arg>& args) const {
  std::lock_guard<std::recursive_mutex> lk(impl_->mu);
  Key k = key_of(args, impl_->opts.runtime_scalars);
  for (const auto& v : impl_->versions)
    if (mismatch(v->key, k).empty()) return true;
  return false;
}

TracedVersion Engine::traced_version(const std::vector<Arg>& args) const {
  return impl_->traced_version(args);
}

}  // namespace kiln::detail::jit_engine
