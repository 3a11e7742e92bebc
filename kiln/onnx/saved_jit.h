// Saved jitted functions: one compiled version of a kiln::jit function (its traced graph and its
// guards: argument kinds, dtypes, shapes with dynamic dims, constant scalar values) written in
// the saved-graph format, loaded in another process as a callable that checks the guards and
// runs the graph in a Session, bit for bit as the saving process ran it; or exported as standard
// ONNX. A version with a graph break (a trace tree, host code that reruns) is refused.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/jit/engine.h"
#include "kiln/onnx/onnx_export.h"
#include "kiln/onnx/saved_graph.h"

namespace onnx {
class ModelProto;
}

namespace kiln::onnx {

class LoadedJit;

namespace detail {
using JitArgs = std::vector<::kiln::detail::jit_engine::Arg>;
void save_jit_version(const std::string& path, const ::kiln::detail::jit_engine::Engine& e,
                      const JitArgs& args, const SaveOptions& opts);
std::string save_jit_version_bytes(const ::kiln::detail::jit_engine::Engine& e,
                                   const JitArgs& args);
void export_jit_version(const std::string& path, const ::kiln::detail::jit_engine::Engine& e,
                        const JitArgs& args, const SaveOptions& opts);
LoadedJit load_jit_model(const ::onnx::ModelProto& m, const std::string& what);
}  // namespace detail

/// Saves the version of `f` that a call with `args` replays (call `f(args...)` first). The
/// file is a saved graph (load_graph reads it too) with the guards in its metadata. Raises
/// kiln::Error ("[save_jit] ...") naming why when that version has a graph break, reruns host
/// code, runs eagerly or assigns module buffers.
template <typename F, typename... A>
void save_jit(const std::string& path, const JitFunction<F>& f, const A&... args) {
  detail::save_jit_version(path, f.engine(), {::kiln::detail::jit_engine::to_arg(args)...}, {});
}
/// The same with options (SaveOptions::external_data: the captured weights beside the file).
template <typename F, typename... A>
void save_jit(const std::string& path, const SaveOptions& options, const JitFunction<F>& f,
              const A&... args) {
  detail::save_jit_version(path, f.engine(), {::kiln::detail::jit_engine::to_arg(args)...},
                           options);
}
template <typename F, typename... A>
std::string save_jit_bytes(const JitFunction<F>& f, const A&... args) {
  return detail::save_jit_version_bytes(f.engine(), {::kiln::detail::jit_engine::to_arg(args)...});
}

/// Exports that version with standard ONNX ops (export_onnx): inputs named arg0, arg1, ... (one
/// per tensor, list element and runtime scalar, in argument order), outputs out0, out1, ...
template <typename F, typename... A>
void export_jit_onnx(const std::string& path, const JitFunction<F>& f, const A&... args) {
  detail::export_jit_version(path, f.engine(), {::kiln::detail::jit_engine::to_arg(args)...}, {});
}

/// A loaded jitted function: call it with the arguments the saved function took (tensors,
/// vectors of tensors, numbers, bools); it checks the saved guards and runs the graph. Results
/// come flattened, in the order fn returned them. Calls that record gradients are not replayed
/// as such: the loaded function is for inference.
class LoadedJit {
 public:
  template <typename... A>
  std::vector<Tensor> operator()(const A&... args) {
    return run({::kiln::detail::jit_engine::to_arg(args)...});
  }
  /// Raises kiln::Error "[load_jit] 'name': guard failed: arg 0 dim 1: expected 4, got 5 ..."
  /// when the arguments are not what the saved version was compiled for.
  std::vector<Tensor> run(const detail::JitArgs& args);
  const std::string& name() const { return name_; }
  /// The guards, one clause per argument (as explain() prints them).
  std::string guards() const;
  const LoadedGraph& graph() const { return g_; }

  LoadedJit(LoadedJit&&) noexcept;
  LoadedJit& operator=(LoadedJit&&) noexcept;
  ~LoadedJit();

 private:
  friend LoadedJit detail::load_jit_model(const ::onnx::ModelProto& m, const std::string& what);
  LoadedJit();

 public:
  struct Guards;  // the parsed guard key (saved_jit.cpp)

 private:
  std::string name_;
  LoadedGraph g_;
  std::unique_ptr<Guards> guards_;
  std::unique_ptr<Session> sess_;
};

/// Loads a file save_jit wrote. A file without jit guards, with guards that do not parse or
/// that disagree with the graph's inputs, gives kiln::Error ("[load_jit] ..."), as does anything
/// load_graph refuses. External data is read beside the file (load_jit_bytes refuses it).
LoadedJit load_jit(const std::string& path);
LoadedJit load_jit_bytes(const void* data, size_t size, const std::string& what = "jit");

}  // namespace kiln::onnx
