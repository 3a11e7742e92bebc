// Saved jitted functions across processes (saved_jit.h): this process jits functions, calls
// them, saves the compiled version, and writes the calls' arguments and results; then this same
// binary runs again as a child (--child DIR) that loads each file with load_jit, makes the same
// calls and checks the results equal the jitted function's bit for bit, and that calls outside
// the guards raise kiln::Error naming the failed guard. Also: versions with graph breaks are
// refused with the reason, and hostile guard metadata is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kiln/kiln.h"
#include "kiln/onnx/onnx_import.h"
#include "kiln/onnx/saved_jit.h"
#include "onnx/onnx_pb.h"

namespace fs = std::filesystem;
using namespace kiln;
namespace je = kiln::detail::jit_engine;

namespace {

std::string g_self;

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.raw_data(), cb.raw_data(),
                     static_cast<size_t>(ca.numel()) * dtype_size(ca.dtype())) == 0;
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_jit_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A call directory: "args" has one line per argument ("t", "l <n>", "s <value>", "b <0|1>")
// with tensors in a<i>.pb / a<i>_<t>.pb; then either want<k>.pb (the jitted function's results)
// or "error" (a part of the message the loaded function must raise).
void write_call(const fs::path& dir, const std::vector<je::Arg>& args,
                const std::vector<Tensor>& want, const std::string& error = "") {
  fs::create_directories(dir);
  std::ofstream a(dir / "args");
  for (size_t i = 0; i < args.size(); ++i) {
    const je::Arg& x = args[i];
    if (x.kind == je::Arg::kTensor) {
      a << "t\n";
      kiln::onnx::write_tensor_pb((dir / ("a" + std::to_string(i) + ".pb")).string(), x.t);
    } else if (x.kind == je::Arg::kTensorList) {
      a << "l " << x.ts.size() << "\n";
      for (size_t t = 0; t < x.ts.size(); ++t)
        kiln::onnx::write_tensor_pb(
            (dir / ("a" + std::to_string(i) + "_" + std::to_string(t) + ".pb")).string(), x.ts[t]);
    } else {
      a << (x.kind == je::Arg::kBool ? "b " : "s ") << x.v << "\n";
    }
  }
  for (size_t k = 0; k < want.size(); ++k)
    kiln::onnx::write_tensor_pb((dir / ("want" + std::to_string(k) + ".pb")).string(), want[k]);
  if (!error.empty()) std::ofstream(dir / "error") << error;
}

template <typename... A>
std::vector<je::Arg> args_of(const A&... a) {
  return {je::to_arg(a)...};
}

int run_child(const fs::path& root) {
  int bad = 0;
  for (const auto& c : fs::directory_iterator(root)) {
    if (!c.is_directory()) continue;
    const std::string cname = c.path().filename().string();
    try {
      kiln::onnx::LoadedJit f = kiln::onnx::load_jit((c.path() / "jit.onnx").string());
      std::cout << "child: " << cname << ": loaded '" << f.name() << "', guards " << f.guards()
                << "\n";
      for (const auto& call : fs::directory_iterator(c.path())) {
        if (!call.is_directory()) continue;
        const fs::path d = call.path();
        std::vector<je::Arg> args;
        std::ifstream in(d / "args");
        std::string kind;
        for (size_t i = 0; in >> kind; ++i) {
          const std::string base = (d / ("a" + std::to_string(i))).string();
          if (kind == "t") {
            args.push_back(je::to_arg(kiln::onnx::read_tensor_pb(base + ".pb")));
          } else if (kind == "l") {
            size_t n = 0;
            in >> n;
            std::vector<Tensor> ts;
            for (size_t t = 0; t < n; ++t)
              ts.push_back(kiln::onnx::read_tensor_pb(base + "_" + std::to_string(t) + ".pb"));
            args.push_back(je::to_arg(ts));
          } else {
            double v = 0;
            in >> v;
            args.push_back(kind == "b" ? je::to_arg(v != 0) : je::to_arg(v));
          }
        }
        const std::string what = cname + "/" + d.filename().string();
        if (fs::exists(d / "error")) {
          std::string expect;
          std::getline(std::ifstream(d / "error"), expect);
          try {
            f.run(args);
            std::cout << "child: " << what << ": ran, but should raise '" << expect << "'\n";
            ++bad;
          } catch (const Error& e) {
            const bool ok = std::string(e.what()).find(expect) != std::string::npos &&
                            std::string(e.what()).rfind("[load_jit]", 0) == 0;
            std::cout << "child: " << what << ": " << (ok ? "refused: " : "WRONG ERROR: ")
                      << e.what() << "\n";
            bad += !ok;
          }
          continue;
        }
        std::vector<Tensor> got = f.run(args);
        for (size_t k = 0;; ++k) {
          const fs::path w = d / ("want" + std::to_string(k) + ".pb");
          if (!fs::exists(w)) {
            if (k != got.size()) {
              std::cout << "child: " << what << ": " << got.size() << " results, want " << k
                        << "\n";
              ++bad;
            }
            break;
          }
          if (k >= got.size()) {
            ++bad;
            break;
          }
          const bool eq = bit_equal(got[k], kiln::onnx::read_tensor_pb(w.string()));
          std::cout << "child: " << what << " result " << k << " " << got[k].dtype()
                    << got[k].shape() << (eq ? " equal bit for bit" : " DIFFERS") << "\n";
          bad += !eq;
        }
      }
    } catch (const std::exception& ex) {
      std::cout << "child: " << cname << ": " << ex.what() << "\n";
      ++bad;
    }
  }
  return bad;
}

int run_child_process(const fs::path& dir) {
  const std::string cmd = "'" + g_self + "' --child '" + dir.string() + "'";
  return std::system(cmd.c_str());
}

// An MLP with captured weights (constants of the trace), a constant scalar (a guard on its
// value) and a runtime scalar; called at batch 3 then 5, so the saved version has a dynamic
// batch dim and serves batch 7 in the other process too.
TEST(SavedJit, MlpWithDynamicBatchInAnotherProcess) {
  manual_seed(11);
  Tensor w1 = mul(randn({8, 16}), 0.3), b1 = mul(randn({16}), 0.1);
  Tensor w2 = mul(randn({16, 4}), 0.3);
  JitOptions opt;
  opt.name = "mlp";
  opt.runtime_scalars = {2};
  auto f = jit(
      [&](const Tensor& x, int k, const Tensor& temp) {
        Tensor h = gelu(add(matmul(x, w1), b1));
        Tensor logits = div(matmul(h, w2), temp);
        return std::make_tuple(softmax(mul(logits, double(k)), -1), sum(h, {1}));
      },
      opt);
  std::vector<Tensor> xs{randn({3, 8}), randn({5, 8}), randn({7, 8})};
  std::vector<std::vector<Tensor>> want;
  for (const auto& x : xs) {
    auto [p, s] = f(x, 3, 0.5);
    want.push_back({p, s});
  }
  EXPECT_EQ(f.stats().compiles, 2) << f.explain();
  fs::path dir = fresh_dir("mlp");
  fs::create_directories(dir / "mlp");
  kiln::onnx::save_jit((dir / "mlp" / "jit.onnx").string(), f, xs[1], 3, 0.5);
  for (size_t c = 0; c < xs.size(); ++c)
    write_call(dir / "mlp" / ("call" + std::to_string(c)), args_of(xs[c], 3, 0.5), want[c]);
  write_call(dir / "mlp" / "bad_value", args_of(xs[0], 4, 0.5), {},
             "guard failed: arg 1 value: expected 3, got 4");
  write_call(dir / "mlp" / "bad_dim", args_of(randn({3, 9}), 3, 0.5), {},
             "guard failed: arg 0 dim 1: expected 8, got 9");
  write_call(dir / "mlp" / "bad_dtype", args_of(cast(xs[0], Float64), 3, 0.5), {},
             "guard failed: arg 0 dtype: expected float32, got float64");
  write_call(dir / "mlp" / "bad_count", args_of(xs[0], 3), {}, "guard failed: number of arguments");
  // The same version with its captured weights in a safetensors file beside it.
  fs::create_directories(dir / "mlp_external");
  kiln::onnx::save_jit((dir / "mlp_external" / "jit.onnx").string(), {.external_data = true}, f,
                       xs[1], 3, 0.5);
  EXPECT_TRUE(fs::exists(dir / "mlp_external" / "jit.safetensors"));
  for (size_t c = 0; c < xs.size(); ++c)
    write_call(dir / "mlp_external" / ("call" + std::to_string(c)), args_of(xs[c], 3, 0.5),
               want[c]);
  EXPECT_EQ(run_child_process(dir), 0);
  fs::remove_all(dir);
}

// A list argument, a bool constant and a function whose cond (Switch/Merge) runs in the jit's
// interpreter loop rather than a Session.
TEST(SavedJit, ListArgumentAndCondInAnotherProcess) {
  manual_seed(12);
  auto f = jit([](const std::vector<Tensor>& xs, bool flip) {
    Tensor s = add(xs[0], mul(xs[1], 2.0));
    Tensor r = cond(
        gt(sum(s), 0.0), [&] { return tanh(s); }, [&] { return neg(exp(s)); });
    return flip ? neg(r) : r;
  });
  std::vector<Tensor> a{randn({4, 3}), randn({4, 3})};
  std::vector<Tensor> b{neg(abs(randn({4, 3}))), neg(abs(randn({4, 3})))};
  Tensor ra = f(a, true), rb = f(b, true);
  fs::path dir = fresh_dir("cond");
  fs::create_directories(dir / "cond");
  kiln::onnx::save_jit((dir / "cond" / "jit.onnx").string(), f, a, true);
  write_call(dir / "cond" / "call0", args_of(a, true), {ra});
  write_call(dir / "cond" / "call1", args_of(b, true), {rb});
  write_call(dir / "cond" / "bad_bool", args_of(a, false), {},
             "guard failed: arg 1 value: expected 1, got 0");
  write_call(dir / "cond" / "bad_len", args_of(std::vector<Tensor>{a[0]}, true), {},
             "guard failed: arg 0: list length: expected 2, got 1");
  EXPECT_EQ(run_child_process(dir), 0);
  fs::remove_all(dir);
}

void expect_refused(const std::function<void()>& save, const std::string& part) {
  try {
    save();
    FAIL() << "saved; expected a refusal containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[save_jit]", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    std::cout << "refused: " << e.what() << "\n";
  }
}

TEST(SavedJit, VersionsWithGraphBreaksAreRefused) {
  auto body = [](const Tensor& x) {
    const float s = sum(x).item<float>();  // a host read: graph break
    return s > 0 ? mul(x, 2.0) : neg(x);
  };
  Tensor x = ones({3});
  // kAuto: the host code reruns on every call.
  auto rerun = jit(body);
  rerun(x);
  expect_refused([&] { kiln::onnx::save_jit_bytes(rerun, x); }, "host code reruns");
  // kReplay: a trace tree of two pieces.
  auto tree = jit(body, JitOptions{.host_code = JitOptions::HostCode::kReplay});
  tree(x);
  expect_refused([&] { kiln::onnx::save_jit_bytes(tree, x); }, "graph break at");
  // Arguments no version was compiled for.
  auto plain = jit([](const Tensor& t) { return relu(t); });
  plain(x);
  expect_refused(
      [&] {
        kiln::onnx::save_jit_bytes(plain, ones({2, 2}));
      },
      "no compiled version accepts");
}

TEST(SavedJit, ExportsStandardOnnxThatImportsBack) {
  manual_seed(13);
  Tensor w = randn({6, 3});
  auto f = jit([&](const Tensor& x) { return softmax(matmul(relu(x), w), -1); });
  Tensor x = randn({4, 6});
  Tensor want = f(x);
  fs::path dir = fresh_dir("export");
  kiln::onnx::export_jit_onnx((dir / "f.onnx").string(), f, x);
  kiln::onnx::ImportedModel m = kiln::onnx::import_model((dir / "f.onnx").string());
  Session s(m.graph);
  Tensor got = m.run(s, {x})[0];
  EXPECT_EQ(m.input_names, std::vector<std::string>{"arg0"});
  auto a = got.to_vector<double>(), b = want.to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
  fs::remove_all(dir);
}

TEST(SavedJit, HostileGuardsAreRefused) {
  auto f = jit([](const Tensor& x, int k) { return mul(x, double(k)); });
  Tensor x = ones({2, 3});
  f(x, 2);
  const std::string good = kiln::onnx::save_jit_bytes(f, x, 2);
  kiln::onnx::LoadedJit ok = kiln::onnx::load_jit_bytes(good.data(), good.size());
  EXPECT_TRUE(bit_equal(ok(x, 2)[0], f(x, 2)));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"tensor float32 [2,3] arg0\nscalar 2\nscalar 1\n", "input"},  // ok text, one arg too many
      {"tensor float99 [2,3] arg0\nscalar 2\n", "unknown dtype"},
      {"tensor float32 [2,3 arg0\nscalar 2\n", "bad shape"},
      {"tensor float32 [2,-7] arg0\nscalar 2\n", "bad dim"},
      {"tensor float32 [2,3] arg0\nscalar two\n", "bad value"},
      {"list 99999999999 float32 [2] a\n", "bad list length"},
      {"tensor float32 [2,4] arg0\nscalar 2\n", "but the guard of argument 0 says"},
      {"tensor int64 [2,3] arg0\nscalar 2\n", "but the guard of argument 0 says"},
      {"tensor float32 [2,3] other\nscalar 2\n", "belongs to no argument"},
      {"frob\n", "unknown argument kind"},
  };
  for (const auto& [text, part] : cases) {
    ::onnx::ModelProto m;
    ASSERT_TRUE(m.ParseFromString(good));
    for (auto& p : *m.mutable_metadata_props())
      if (p.key() == "kiln.jit.guards") p.set_value(text);
    const std::string b = m.SerializeAsString();
    try {
      kiln::onnx::LoadedJit lj = kiln::onnx::load_jit_bytes(b.data(), b.size());
      if (part == "input") {  // parses; the extra argument's guard fails at the call
        EXPECT_THROW(lj(x, 2), Error);
        continue;
      }
      ADD_FAILURE() << "loaded guards: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[load_jit]", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
  // A saved graph without guards.
  ::onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(good));
  m.clear_metadata_props();
  const std::string b = m.SerializeAsString();
  EXPECT_THROW(kiln::onnx::load_jit_bytes(b.data(), b.size()), Error);
  // Every prefix of the file: an error or a load, never a crash.
  for (size_t n = 0; n < good.size(); n += 7) {
    try {
      kiln::onnx::load_jit_bytes(good.data(), n);
    } catch (const Error&) {
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  g_self = fs::canonical("/proc/self/exe").string();
  if (argc == 3 && std::string(argv[1]) == "--child") return run_child(argv[2]) == 0 ? 0 : 1;
  if (argc == 3 && std::string(argv[1]) == "--write-seed") {  // fuzz/corpus/saved_graph/jit.onnx
    auto f = jit([](const Tensor& x, int k) { return relu(mul(x, double(k))); });
    f(ones({2, 3}), 2);
    kiln::onnx::save_jit(argv[2], f, ones({2, 3}), 2);
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
