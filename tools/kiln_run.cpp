// kiln-run: loads an ONNX model or a Kiln saved graph, feeds .npy inputs, runs it in a Session
// and writes the outputs (.npz), optionally timing N runs with latency percentiles.
//   kiln-run model.onnx|model.kiln --input name=file.npy ... [--output out.npz] [--bench N]
//            [--threads T] [--quiet]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/io/npy.h"
#include "kiln/kiln.h"
#include "kiln/onnx/onnx_import.h"
#include "kiln/onnx/saved_graph.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int usage() {
  std::fprintf(stderr,
               "usage: kiln-run MODEL (.onnx or a Kiln saved graph) --input NAME=FILE.npy ... "
               "[--output OUT.npz] [--bench N] [--threads T] [--quiet]\n");
  return 2;
}

struct Model {
  Graph graph;
  std::vector<std::string> input_names, output_names;
  std::vector<Tensor> inputs, outputs;
  std::string kind;
};

std::string describe(const Tensor& t) { return str_cat(dtype_name(t.dtype()), t.shape()); }

// Raises naming the first model input without a --input, what it expects and which dims the
// array would fix.
void check_all_fed(const std::vector<std::string>& names, const std::vector<Tensor>& inputs,
                   const std::vector<std::pair<std::string, Tensor>>& feeds) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (std::any_of(feeds.begin(), feeds.end(), [&](const auto& p) { return p.first == names[k]; }))
      continue;
    std::string all;
    for (size_t j = 0; j < names.size(); ++j)
      all += str_cat(j ? ", " : "", names[j], " ", describe(inputs[j]));
    const bool dynamic = !inputs[k].shape().is_static();
    fail("kiln-run", "no --input for '", names[k], "' (it expects ", describe(inputs[k]),
         dynamic ? "; its ? dims are dynamic and the fed array fixes them" : "",
         "; the model's inputs: ", all, ")");
  }
}

// From the path, not from bytes: external weights (SaveOptions::external_data, or a standard
// ONNX file's external data) are read beside the model.
Model load(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& feeds) {
  Model m;
  if (onnx::is_saved_graph(path)) {
    onnx::LoadedGraph lg = onnx::load_graph(path);
    m.graph = lg.graph;
    for (auto& [n, t] : lg.inputs) m.input_names.push_back(n), m.inputs.push_back(t);
    for (auto& [n, t] : lg.outputs) m.output_names.push_back(n), m.outputs.push_back(t);
    m.kind = "Kiln saved graph";
    return m;
  }
  // Standard ONNX: the fed arrays' shapes fix the model's symbolic dims.
  onnx::ImportOptions opt;
  for (const auto& [n, t] : feeds) opt.input_shapes[n] = t.shape();
  onnx::ImportedModel im;
  try {
    im = onnx::import_model(path, opt);
  } catch (const Error&) {
    // An input left without --input keeps its symbolic dims, and the first op that needs them
    // fails naming only itself: name the input instead.
    const onnx::ImportedModel probe = onnx::import_model_inputs_only(path);
    check_all_fed(probe.input_names, probe.inputs, feeds);
    throw;
  }
  m.graph = im.graph;
  m.input_names = im.input_names;
  m.inputs = im.inputs;
  m.output_names = im.output_names;
  m.outputs = im.outputs;
  m.kind = "ONNX opset " + std::to_string(im.opset);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  // Inference only: back off to one thread while other processes starve this one (the load
  // guard, kiln/kernels/cpu/parallel.h), unless the caller said otherwise.
  setenv("KILN_LOAD_GUARD", "1", /*overwrite=*/0);
  const auto t0 = Clock::now();
  std::string model_path, out_path;
  std::vector<std::pair<std::string, std::string>> input_files;
  int64_t bench = 0, threads = 0;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--input") {
        std::string v = next();
        size_t eq = v.find('=');
        if (eq == std::string::npos || eq == 0) return usage();
        input_files.emplace_back(v.substr(0, eq), v.substr(eq + 1));
      } else if (a == "--output") {
        out_path = next();
      } else if (a == "--bench") {
        bench = std::stoll(next());
      } else if (a == "--threads") {
        threads = std::stoll(next());
      } else if (a == "--quiet") {
        quiet = true;
      } else if (a == "-h" || a == "--help") {
        return usage();
      } else if (model_path.empty() && a.rfind("--", 0) != 0) {
        model_path = a;
      } else {
        return usage();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln-run: %s\n", e.what());
      return usage();
    }
  }
  if (model_path.empty() || bench < 0) return usage();
  try {
    if (threads > 0) set_num_threads(static_cast<int>(threads));
    std::vector<std::pair<std::string, Tensor>> feeds_by_name;
    for (const auto& [n, f] : input_files) feeds_by_name.emplace_back(n, io::read_npy(f));
    Model m = load(model_path, feeds_by_name);
    const double load_ms = ms_since(t0);
    FeedDict feeds;
    check_all_fed(m.input_names, m.inputs, feeds_by_name);
    for (size_t k = 0; k < m.inputs.size(); ++k) {
      auto it = std::find_if(feeds_by_name.begin(), feeds_by_name.end(),
                             [&](const auto& p) { return p.first == m.input_names[k]; });
      const Tensor& want = m.inputs[k];
      const Tensor& got = it->second;
      bool ok = got.dtype() == want.dtype() && got.dim() == want.dim();
      for (int64_t d = 0; ok && d < want.dim(); ++d)
        ok = want.size(d) < 0 || want.size(d) == got.size(d);
      if (!ok)
        fail("kiln-run", "input '", m.input_names[k], "' expects ", describe(want), ", given ",
             describe(got), " from '",
             input_files[static_cast<size_t>(it - feeds_by_name.begin())].second, "'");
      if (want.is_symbolic()) feeds.emplace_back(want, got);
    }
    for (const auto& [n, t] : feeds_by_name)
      if (std::find(m.input_names.begin(), m.input_names.end(), n) == m.input_names.end())
        fail("kiln-run", "the model has no input '", n, "'");
    Session sess(m.graph);
    std::vector<Tensor> fetches;
    std::vector<size_t> where;
    std::vector<Tensor> results(m.outputs.size());
    for (size_t k = 0; k < m.outputs.size(); ++k) {
      if (m.outputs[k].is_symbolic())
        fetches.push_back(m.outputs[k]), where.push_back(k);
      else
        results[k] = m.outputs[k];
    }
    auto run = [&] {
      std::vector<Tensor> got = sess.run(fetches, feeds);
      for (size_t k = 0; k < got.size(); ++k) results[where[k]] = got[k];
    };
    run();
    const double first_ms = ms_since(t0);
    if (!quiet) {
      std::printf("%s: %s, %zu nodes; load %.2f ms, first result %.2f ms after start\n",
                  model_path.c_str(), m.kind.c_str(), m.graph.nodes().size(), load_ms, first_ms);
      for (size_t k = 0; k < results.size(); ++k) {
        Tensor r = contiguous(results[k]);
        std::ostringstream os;
        os << m.output_names[k] << ": " << dtype_name(r.dtype()) << r.shape();
        auto v = r.to_vector<double>();
        os << " [";
        for (size_t i = 0; i < std::min<size_t>(v.size(), 6); ++i) os << (i ? ", " : "") << v[i];
        os << (v.size() > 6 ? ", ...]" : "]");
        std::printf("  %s\n", os.str().c_str());
      }
    }
    if (!out_path.empty()) {
      std::vector<std::pair<std::string, Tensor>> named;
      for (size_t k = 0; k < results.size(); ++k)
        named.emplace_back(m.output_names[k], contiguous(results[k]));
      io::write_npz(out_path, named);
    }
    if (bench > 0) {
      std::vector<double> lat;
      const int64_t warm = std::min<int64_t>(bench, 10);
      for (int64_t i = 0; i < warm; ++i) run();
      for (int64_t i = 0; i < bench; ++i) {
        const auto s = Clock::now();
        run();
        lat.push_back(ms_since(s));
      }
      std::sort(lat.begin(), lat.end());
      auto pct = [&](double p) {
        return lat[std::min(lat.size() - 1, static_cast<size_t>(p / 100.0 * lat.size()))];
      };
      double mean = 0;
      for (double l : lat) mean += l / static_cast<double>(lat.size());
      std::printf(
          "bench: %lld runs (after %lld warm-up), %d thread(s): min %.3f  p50 %.3f  p90 %.3f  "
          "p99 %.3f  max %.3f  mean %.3f ms\n",
          static_cast<long long>(bench), static_cast<long long>(warm), get_num_threads(), lat[0],
          pct(50), pct(90), pct(99), lat.back(), mean);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-run: %s\n", e.what());
    return 1;
  }
  return 0;
}
