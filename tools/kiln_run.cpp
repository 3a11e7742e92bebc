// kiln-run: loads an ONNX model or a Kiln saved graph, feeds .npy inputs, runs it in a Session
// and writes the outputs (.npz), optionally timing N runs with latency percentiles. uint16/32/64
// .npy inputs and outputs are held widened (int32, int64), as the ONNX importer holds them.
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
  // Per input and output: the unsigned type an ONNX model declares for it (held widened), else
  // None.
  std::vector<io::NpyUnsigned> input_unsigned, output_unsigned;
  std::string kind;
};

// An --input: its array (uint16/32/64 widened, `source` saying which) and the file it came from.
struct Feed {
  std::string name, file;
  Tensor t;
  io::NpyUnsigned source = io::NpyUnsigned::None;
};

// ONNX's TensorProto UINT16, UINT32 and UINT64 element types.
io::NpyUnsigned unsigned_of_onnx(int32_t elem_type) {
  switch (elem_type) {
    case 4:
      return io::NpyUnsigned::U16;
    case 12:
      return io::NpyUnsigned::U32;
    case 13:
      return io::NpyUnsigned::U64;
    default:
      return io::NpyUnsigned::None;
  }
}

std::vector<io::NpyUnsigned> unsigned_of_onnx(const std::vector<int32_t>& elem_types) {
  std::vector<io::NpyUnsigned> out;
  for (int32_t et : elem_types) out.push_back(unsigned_of_onnx(et));
  return out;
}

// A tensor as its dtype and shape; a widened unsigned value as the type it holds.
std::string describe(const Tensor& t, io::NpyUnsigned u = io::NpyUnsigned::None) {
  return str_cat(u != io::NpyUnsigned::None ? io::npy_unsigned_name(u) : dtype_name(t.dtype()),
                 t.shape());
}

io::NpyUnsigned nth_or_none(const std::vector<io::NpyUnsigned>& u, size_t k) {
  return k < u.size() ? u[k] : io::NpyUnsigned::None;
}

const Feed* find_feed(const std::vector<Feed>& feeds, const std::string& name) {
  for (const Feed& f : feeds)
    if (f.name == name) return &f;
  return nullptr;
}

// Raises naming the first model input without a --input, what it expects and which dims the
// array would fix.
void check_all_fed(const std::vector<std::string>& names, const std::vector<Tensor>& inputs,
                   const std::vector<io::NpyUnsigned>& unsigned_inputs,
                   const std::vector<Feed>& feeds) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (find_feed(feeds, names[k])) continue;
    std::string all;
    for (size_t j = 0; j < names.size(); ++j)
      all += str_cat(j ? ", " : "", names[j], " ",
                     describe(inputs[j], nth_or_none(unsigned_inputs, j)));
    const bool dynamic = !inputs[k].shape().is_static();
    fail("kiln-run", "no --input for '", names[k], "' (it expects ",
         describe(inputs[k], nth_or_none(unsigned_inputs, k)),
         dynamic ? "; its ? dims are dynamic and the fed array fixes them" : "",
         "; the model's inputs: ", all, ")");
  }
}

// From the path, not from bytes: external weights (SaveOptions::external_data, or a standard
// ONNX file's external data) are read beside the model.
Model load(const std::string& path, const std::vector<Feed>& feeds) {
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
  for (const Feed& f : feeds) opt.input_shapes[f.name] = f.t.shape();
  onnx::ImportedModel im;
  try {
    im = onnx::import_model(path, opt);
  } catch (const Error&) {
    // An input left without --input keeps its symbolic dims, and the first op that needs them
    // fails naming only itself: name the input instead.
    const onnx::ImportedModel probe = onnx::import_model_inputs_only(path);
    check_all_fed(probe.input_names, probe.inputs, unsigned_of_onnx(probe.input_elem_types), feeds);
    throw;
  }
  m.graph = im.graph;
  m.input_names = im.input_names;
  m.inputs = im.inputs;
  m.output_names = im.output_names;
  m.outputs = im.outputs;
  m.input_unsigned = unsigned_of_onnx(im.input_elem_types);
  m.output_unsigned = unsigned_of_onnx(im.output_elem_types);
  m.kind = "ONNX opset " + std::to_string(im.opset);
  return m;
}

// A feed must have the input's dtype (a uint16/32/64 input: that .npy dtype, or the int32/int64
// it is held in) and rank, and its sizes where the model fixes them. Uint64 values of 2^63 or
// more do not fit the int64 Kiln holds them in: refused here, naming the input.
void check_feed(const Model& m, size_t k, const Feed& f) {
  const Tensor& want = m.inputs[k];
  const io::NpyUnsigned want_u = nth_or_none(m.input_unsigned, k);
  bool ok = f.t.dtype() == want.dtype() && f.t.dim() == want.dim() &&
            (f.source == io::NpyUnsigned::None || f.source == want_u);
  for (int64_t d = 0; ok && d < want.dim(); ++d)
    ok = want.size(d) < 0 || want.size(d) == f.t.size(d);
  if (!ok)
    fail("kiln-run", "input '", f.name, "' expects ", describe(want, want_u), ", given ",
         describe(f.t, f.source), " from '", f.file, "'");
  if (f.source != io::NpyUnsigned::U64) return;
  const std::vector<int64_t> v = contiguous(f.t).to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0)
      fail("kiln-run", "input '", f.name, "': element ", i, " of '", f.file, "' is ",
           static_cast<uint64_t>(v[i]),
           ", 2^63 or more; Kiln holds uint64 values as int64 and cannot take it");
}

// The feeds the Session needs (inputs the import left symbolic), every input checked.
FeedDict match_feeds(const Model& m, const std::vector<Feed>& feeds) {
  check_all_fed(m.input_names, m.inputs, m.input_unsigned, feeds);
  FeedDict out;
  for (size_t k = 0; k < m.inputs.size(); ++k) {
    const Feed& f = *find_feed(feeds, m.input_names[k]);
    check_feed(m, k, f);
    if (m.inputs[k].is_symbolic()) out.emplace_back(m.inputs[k], f.t);
  }
  for (const Feed& f : feeds)
    if (std::find(m.input_names.begin(), m.input_names.end(), f.name) == m.input_names.end())
      fail("kiln-run", "the model has no input '", f.name, "'");
  return out;
}

// One line per output: name, type and its first values (a uint64 one as the unsigned value its
// int64 bits hold).
void print_results(const Model& m, const std::vector<Tensor>& results) {
  for (size_t k = 0; k < results.size(); ++k) {
    Tensor r = contiguous(results[k]);
    const io::NpyUnsigned u = nth_or_none(m.output_unsigned, k);
    std::ostringstream os;
    os << m.output_names[k] << ": " << describe(r, u) << " [";
    const size_t n = std::min<size_t>(static_cast<size_t>(r.numel()), 6);
    if (u != io::NpyUnsigned::None) {
      auto v = r.to_vector<int64_t>();
      for (size_t i = 0; i < n; ++i) os << (i ? ", " : "") << static_cast<uint64_t>(v[i]);
    } else {
      auto v = r.to_vector<double>();
      for (size_t i = 0; i < n; ++i) os << (i ? ", " : "") << v[i];
    }
    os << (r.numel() > 6 ? ", ...]" : "]");
    std::printf("  %s\n", os.str().c_str());
  }
}

void write_outputs(const std::string& path, const Model& m, const std::vector<Tensor>& results) {
  std::vector<std::pair<std::string, Tensor>> named;
  for (size_t k = 0; k < results.size(); ++k)
    named.emplace_back(m.output_names[k], contiguous(results[k]));
  // Declared uint16/32/64 outputs go back to their own dtypes, checked to fit.
  std::vector<io::NpyUnsigned> as(results.size(), io::NpyUnsigned::None);
  for (size_t k = 0; k < as.size(); ++k) as[k] = nth_or_none(m.output_unsigned, k);
  io::write_npz(path, named, as);
}

template <typename Run>
void bench_runs(int64_t bench, Run&& run) {
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

struct Options {
  std::string model_path, out_path;
  std::vector<std::pair<std::string, std::string>> input_files;  // (name, file)
  int64_t bench = 0, threads = 0;
  bool quiet = false;
};

// False where the command line is not one kiln-run takes (the caller prints the usage).
bool parse_args(int argc, char** argv, Options& o) {
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
        if (eq == std::string::npos || eq == 0) return false;
        o.input_files.emplace_back(v.substr(0, eq), v.substr(eq + 1));
      } else if (a == "--output") {
        o.out_path = next();
      } else if (a == "--bench") {
        o.bench = std::stoll(next());
      } else if (a == "--threads") {
        o.threads = std::stoll(next());
      } else if (a == "--quiet") {
        o.quiet = true;
      } else if (a == "-h" || a == "--help") {
        return false;
      } else if (o.model_path.empty() && a.rfind("--", 0) != 0) {
        o.model_path = a;
      } else {
        return false;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln-run: %s\n", e.what());
      return false;
    }
  }
  return !o.model_path.empty() && o.bench >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Inference only: back off to one thread while other processes starve this one (the load
  // guard, kiln/kernels/cpu/parallel.h), unless the caller said otherwise.
  setenv("KILN_LOAD_GUARD", "1", /*overwrite=*/0);
  const auto t0 = Clock::now();
  Options o;
  if (!parse_args(argc, argv, o)) return usage();
  const auto& [model_path, out_path, input_files, bench, threads, quiet] = o;
  try {
    if (threads > 0) set_num_threads(static_cast<int>(threads));
    std::vector<Feed> fed;
    for (const auto& [n, file] : input_files) {
      Feed f{n, file, {}, io::NpyUnsigned::None};
      f.t = io::read_npy_widened(file, &f.source);
      fed.push_back(std::move(f));
    }
    Model m = load(model_path, fed);
    const double load_ms = ms_since(t0);
    const FeedDict feeds = match_feeds(m, fed);
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
      print_results(m, results);
    }
    // With --bench the file holds the last run's results: a bound (planned) run, not the first.
    if (bench > 0) bench_runs(bench, run);
    if (!out_path.empty()) write_outputs(out_path, m, results);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-run: %s\n", e.what());
    return 1;
  }
  return 0;
}
