// Saved graphs across processes: a trained CNN, the lecture's Switch/Merge example (with a
// print node) and a while_loop RNN are saved by this process, then this same binary is run again
// as a child (--child DIR) that loads each file and checks its outputs equal the parent's bit
// for bit. Also: a newer format version, truncated and bit-flipped files give kiln::Error.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kiln/graph/node.h"
#include "kiln/io/npy.h"
#include "kiln/io/safetensors.h"
#include "kiln/kiln.h"
#include "kiln/onnx/onnx_import.h"
#include "kiln/onnx/saved_graph.h"
#include "kiln/optim/optim.h"
#include "onnx/onnx_pb.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

std::string g_self;

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.raw_data(), cb.raw_data(),
                     static_cast<size_t>(ca.numel()) * dtype_size(ca.dtype())) == 0;
}

// A case directory: graph.onnx, feed_<placeholder>.pb, want_<output>.pb.
void write_case(const fs::path& dir, const Graph& g, const kiln::onnx::NamedTensors& outputs,
                const Session& sess, const FeedDict& feeds, const std::vector<Tensor>& want,
                const kiln::onnx::SaveOptions& opts = {}) {
  fs::create_directories(dir);
  kiln::onnx::save_graph((dir / "graph.onnx").string(), g, outputs, &sess, opts);
  for (const auto& [ph, v] : feeds) {
    const std::string name = g.node_of(ph)->name;
    kiln::onnx::write_tensor_pb((dir / ("feed_" + name + ".pb")).string(), v, name);
  }
  for (size_t k = 0; k < outputs.size(); ++k)
    kiln::onnx::write_tensor_pb((dir / ("want_" + outputs[k].first + ".pb")).string(), want[k]);
}

// The child's side: load every case under `root` and compare; returns the number of failures.
int run_child(const fs::path& root) {
  int bad = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory()) continue;
    try {
      kiln::onnx::LoadedGraph lg = kiln::onnx::load_graph((e.path() / "graph.onnx").string());
      FeedDict feeds;
      for (const auto& [name, ph] : lg.inputs) {
        const fs::path f = e.path() / ("feed_" + name + ".pb");
        if (fs::exists(f)) feeds.emplace_back(ph, kiln::onnx::read_tensor_pb(f.string()));
      }
      Session sess(lg.graph);
      std::vector<Tensor> fetches;
      for (const auto& [name, t] : lg.outputs) fetches.push_back(t);
      std::vector<Tensor> got = sess.run(fetches, feeds);
      for (size_t k = 0; k < lg.outputs.size(); ++k) {
        Tensor want = kiln::onnx::read_tensor_pb(
            (e.path() / ("want_" + lg.outputs[k].first + ".pb")).string());
        const bool eq = bit_equal(got[k], want);
        std::cout << "child: " << e.path().filename().string() << " output '" << lg.outputs[k].first
                  << "' " << got[k].shape() << (eq ? " equal bit for bit" : " DIFFERS") << " ("
                  << lg.graph.nodes().size() << " nodes loaded)\n";
        bad += !eq;
      }
    } catch (const std::exception& ex) {
      std::cout << "child: " << e.path().filename().string() << ": " << ex.what() << "\n";
      ++bad;
    }
  }
  return bad;
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_saved_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

int run_child_process(const fs::path& dir) {
  const std::string cmd = "'" + g_self + "' --child '" + dir.string() + "'";
  return std::system(cmd.c_str());
}

TEST(SavedGraph, TrainedCnnInAnotherProcess) {
  manual_seed(3);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 1, 12, 12});
  Tensor y = g.placeholder("y", Int64, {Dim::any()});
  Tensor w1 = g.variable("w1", mul(randn({4, 1, 3, 3}), 0.3));
  Tensor b1 = g.variable("b1", zeros({4}));
  Tensor w2 = g.variable("w2", mul(randn({10, 100}), 0.1));
  Tensor b2 = g.variable("b2", zeros({10}));
  Tensor h = max_pool2d(relu(conv2d(x, w1, b1)), {2, 2});  // [N, 4, 5, 5]
  Tensor logits = linear(flatten(h, 1), w2, b2);
  Tensor loss = cross_entropy(logits, y);
  Tensor step = optim::SGD(0.1, 0.9).minimize(loss);
  Session sess(g);
  Tensor xs = randn({16, 1, 12, 12});
  Tensor ys = randint(0, 10, {16});
  const double l0 = sess.run(loss, {{x, xs}, {y, ys}}).item<double>();
  for (int i = 0; i < 30; ++i) sess.run(step, {{x, xs}, {y, ys}});
  const double l1 = sess.run(loss, {{x, xs}, {y, ys}}).item<double>();
  EXPECT_LT(l1, l0) << "the CNN did not train";
  Tensor xt = randn({5, 1, 12, 12});
  Tensor yt = randint(0, 10, {5});
  FeedDict feeds{{x, xt}, {y, yt}};
  std::vector<Tensor> want = sess.run({logits, loss}, feeds);
  fs::path dir = fresh_dir("cnn");
  write_case(dir / "cnn", g, {{"logits", logits}, {"loss", loss}}, sess, feeds, want);
  // The same with the weights in a safetensors file beside the model.
  write_case(dir / "cnn_external", g, {{"logits", logits}, {"loss", loss}}, sess, feeds, want,
             {.external_data = true});
  EXPECT_TRUE(fs::exists(dir / "cnn_external" / "graph.safetensors"));
  EXPECT_LT(fs::file_size(dir / "cnn_external" / "graph.onnx"),
            fs::file_size(dir / "cnn" / "graph.onnx") / 3);
  EXPECT_EQ(run_child_process(dir), 0);
  fs::remove_all(dir);
}

TEST(SavedGraph, SwitchMergeInAnotherProcess) {
  // The lecture's x < y ? x + z : y * y as Switch/Merge, with a print node on the result.
  Graph g;
  Tensor x = g.placeholder("x", Float32, {});
  Tensor y = g.placeholder("y", Float32, {});
  Tensor z = g.placeholder("z", Float32, {});
  Tensor pred = lt(x, y);
  auto sx = switch_(x, pred);
  auto sy = switch_(y, pred);
  auto sz = switch_(z, pred);
  Tensor out = merge({mul(sy[0], sy[0]), add(sx[1], sz[1])})[0];
  Tensor shown = print(out, "switch/merge result: ");
  Session sess(g);
  fs::path dir = fresh_dir("switch_merge");
  int k = 0;
  for (auto [xv, yv, zv] : {std::tuple{1.f, 2.f, 5.f}, std::tuple{3.f, 2.f, 5.f}}) {
    FeedDict feeds{{x, scalar_tensor(xv)}, {y, scalar_tensor(yv)}, {z, scalar_tensor(zv)}};
    std::vector<Tensor> want = sess.run({shown}, feeds);
    EXPECT_EQ(want[0].item<float>(), xv < yv ? xv + zv : yv * yv);
    write_case(dir / ("branch" + std::to_string(k++)), g, {{"out", shown}}, sess, feeds, want);
  }
  EXPECT_EQ(run_child_process(dir), 0);
  fs::remove_all(dir);
}

TEST(SavedGraph, WhileLoopRnnInAnotherProcess) {
  manual_seed(5);
  const int64_t hidden = 8;
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), Dim::any(), 1});
  Tensor len = g.placeholder("len", Int64, {});
  Tensor wx = g.variable("wx", mul(randn({1, hidden}), 0.5));
  Tensor wh = g.variable("wh", mul(randn({hidden, hidden}), 0.3));
  Tensor b = g.variable("b", mul(randn({hidden}), 0.1));
  Tensor wo = g.variable("wo", randn({hidden, 1}));
  auto x_at = [&](const Tensor& t) { return squeeze(index_select(x, 0, reshape(t, {1})), 0); };
  Tensor h0 = zeros_like(matmul(x_at(scalar_tensor(0, Int64)), wx));
  auto fin = while_loop([&](const std::vector<Tensor>& v) { return lt(v[0], len); },
                        [&](const std::vector<Tensor>& v) {
                          Tensor h = tanh(add(add(matmul(x_at(v[0]), wx), matmul(v[1], wh)), b));
                          return std::vector<Tensor>{add(v[0], scalar_tensor(1, Int64)), h};
                        },
                        {scalar_tensor(0, Int64), h0});
  Tensor pred = matmul(fin[1], wo);
  Session sess(g);
  fs::path dir = fresh_dir("rnn");
  int k = 0;
  for (int64_t n : {3, 9}) {
    FeedDict feeds{{x, randn({n, 4, 1})}, {len, scalar_tensor(double(n), Int64)}};
    std::vector<Tensor> want = sess.run({pred, fin[1]}, feeds);
    write_case(dir / ("len" + std::to_string(k++)), g, {{"pred", pred}, {"h", fin[1]}}, sess, feeds,
               want);
  }
  EXPECT_EQ(run_child_process(dir), 0);
  fs::remove_all(dir);
}

std::string saved_bytes() {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 3});
  Tensor w = g.variable("w", ones({3, 2}));
  Tensor y = relu(matmul(x, w));
  return kiln::onnx::save_graph_bytes(g, {{"y", y}});
}

// The reduced dtypes survive a save and a load: placeholders, variables, casts and the ops
// computed through float32 keep their element types and give the same bits; a tensor file
// (TensorProto) keeps each dtype too.
TEST(SavedGraph, ReducedDtypesRoundTrip) {
  Graph g;
  Tensor x = g.placeholder("x", BF16, {Dim::any()});
  Tensor w = g.variable("w", cast(tensor({0.5f, -1.5f, 2.f}), Float16));
  Tensor k = g.variable("k", cast(tensor(std::vector<int64_t>{100, -4, 5}), Int8));
  Tensor y = add(cast(x, Float32), cast(w, Float32));
  Tensor h = mul(w, cast(x, Float16));
  Tensor z = add(k, k);  // wraps in int8
  Session sess(g);
  Tensor xv = cast(tensor({1.25f, 3.f, -0.1f}), BF16);
  std::vector<Tensor> want = sess.run({y, h, z}, {{x, xv}});
  ASSERT_EQ(want[1].dtype(), Float16);
  ASSERT_EQ(want[2].dtype(), Int8);
  const std::string b = kiln::onnx::save_graph_bytes(g, {{"y", y}, {"h", h}, {"z", z}}, &sess);
  kiln::onnx::LoadedGraph lg = kiln::onnx::load_graph_bytes(b.data(), b.size());
  EXPECT_EQ(lg.input("x").dtype(), BF16);
  Session s2(lg.graph);
  std::vector<Tensor> got =
      s2.run({lg.output("y"), lg.output("h"), lg.output("z")}, {{lg.input("x"), xv}});
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bit_equal(got[i], want[i])) << i;
  for (DType dt : {Float16, BF16, Int8, UInt8, Int16}) {
    Tensor t = cast(tensor({1.f, 2.f, 3.f, 100.f}), dt);
    fs::path f = fs::temp_directory_path() / ("kiln_dtype_" + std::to_string(int(dt)) + ".pb");
    kiln::onnx::write_tensor_pb(f.string(), t, "t");
    Tensor r = kiln::onnx::read_tensor_pb(f.string());
    fs::remove(f);
    EXPECT_TRUE(bit_equal(r, t)) << dt;
  }
}

// kiln-run's choice between load_graph and import_model: the version key, found without
// parsing the graph, wherever the writer put it; anything else is "not a saved graph".
TEST(SavedGraph, IsSavedGraphReadsOnlyTheTopLevel) {
  const fs::path d = fresh_dir("is_saved");
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(d / name, std::ios::binary) << bytes;
    return (d / name).string();
  };
  const std::string saved = saved_bytes();
  EXPECT_TRUE(kiln::onnx::is_saved_graph(write("saved.onnx", saved)));
  // Metadata before the graph (field order is the writer's choice).
  ::onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(saved));
  ::onnx::ModelProto meta_first;
  *meta_first.mutable_metadata_props() = m.metadata_props();
  const std::string front = meta_first.SerializeAsString() + [&] {
    ::onnx::ModelProto rest = m;
    rest.clear_metadata_props();
    return rest.SerializeAsString();
  }();
  EXPECT_TRUE(kiln::onnx::is_saved_graph(write("front.onnx", front)));
  // The version entry padded with 2 MiB of an unknown field: the full parser accepts it, so the
  // scan must too.
  ::onnx::ModelProto padded = m;
  for (auto& p : *padded.mutable_metadata_props())
    p.GetReflection()->MutableUnknownFields(&p)->AddLengthDelimited(99, std::string(2 << 20, 'x'));
  const std::string padded_path = write("padded.onnx", padded.SerializeAsString());
  EXPECT_TRUE(kiln::onnx::is_saved_graph(padded_path));
  EXPECT_NO_THROW(kiln::onnx::load_graph(padded_path));
  // A standard ONNX model: the same file without the key, or with other metadata only.
  ::onnx::ModelProto plain = m;
  plain.clear_metadata_props();
  auto* md = plain.add_metadata_props();
  md->set_key("producer_note");
  md->set_value("kiln.format_version");
  EXPECT_FALSE(kiln::onnx::is_saved_graph(write("plain.onnx", plain.SerializeAsString())));
  // Unreadable or malformed: false, and the loaders give the reason.
  EXPECT_FALSE(kiln::onnx::is_saved_graph((d / "missing.onnx").string()));
  EXPECT_FALSE(kiln::onnx::is_saved_graph(d.string()));
  EXPECT_FALSE(kiln::onnx::is_saved_graph("/dev/zero"));
  const std::string fifo = (d / "pipe.onnx").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(kiln::onnx::is_saved_graph(fifo));  // no writer: not waited on
  EXPECT_FALSE(kiln::onnx::is_saved_graph(write("empty.onnx", "")));
  EXPECT_FALSE(kiln::onnx::is_saved_graph(write("junk.onnx", std::string(64, '\xff'))));
  // A length past the end, and every prefix of the saved file: never a crash.
  EXPECT_FALSE(
      kiln::onnx::is_saved_graph(write("long.onnx", std::string("\x3a\xff\xff\xff\x0f", 5))));
  for (size_t n = 0; n < saved.size(); n += 7)
    (void)kiln::onnx::is_saved_graph(write("prefix.onnx", saved.substr(0, n)));
  // The loaders read through a mapping: an empty file, a directory and a device are refused.
  for (const std::string& bad :
       {write("empty.onnx", ""), d.string(), std::string("/dev/zero"), fifo}) {
    try {
      kiln::onnx::load_graph(bad);
      ADD_FAILURE() << bad << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[load_graph]", 0), 0u) << e.what();
    }
  }
  fs::remove_all(d);
}

TEST(SavedGraph, NewerVersionIsRefused) {
  ::onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(saved_bytes()));
  for (auto& p : *m.mutable_metadata_props())
    if (p.key() == "kiln.format_version") p.set_value("2");
  const std::string b = m.SerializeAsString();
  try {
    kiln::onnx::load_graph_bytes(b.data(), b.size());
    FAIL() << "a version-2 file loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("newer than this Kiln reads"), std::string::npos)
        << e.what();
  }
}

TEST(SavedGraph, TruncatedAndCorruptFilesGiveErrors) {
  const std::string b = saved_bytes();
  int errors = 0, loaded = 0;
  for (size_t n = 0; n < b.size(); ++n) {  // every prefix
    try {
      kiln::onnx::load_graph_bytes(b.data(), n);
      ++loaded;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[", 0), 0u);
      ++errors;
    }
  }
  for (size_t i = 0; i < b.size(); ++i) {  // every byte with its bits flipped
    std::string c = b;
    c[i] = static_cast<char>(~c[i]);
    try {
      kiln::onnx::LoadedGraph lg = kiln::onnx::load_graph_bytes(c.data(), c.size());
      ++loaded;
    } catch (const Error&) {
      ++errors;
    }
  }
  std::cout << b.size() << "-byte file: " << errors << " truncations/corruptions refused, "
            << loaded << " still loaded\n";
  EXPECT_GT(errors, static_cast<int>(b.size()));
  kiln::onnx::LoadedGraph ok = kiln::onnx::load_graph_bytes(b.data(), b.size());
  Session sess(ok.graph);
  Tensor r = sess.run(ok.output("y"), {{ok.input("x"), ones({2, 3})}});
  EXPECT_EQ(r.to_vector<float>(), std::vector<float>(4, 3.f));
}

// External weights (SaveOptions::external_data): hostile and inconsistent files beside the model
// raise "[load_graph] ..." naming the problem, before anything is sized from them.
struct ExternalCase {
  fs::path dir, model, data;
  ::onnx::ModelProto m;
};

ExternalCase external_case(const std::string& name) {
  ExternalCase c;
  c.dir = fresh_dir("ext_" + name);
  c.model = c.dir / "model.onnx";
  c.data = c.dir / "model.safetensors";
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 3});
  Tensor w = g.variable("w", ones({3, 2}));
  Tensor b = g.variable("b", full({2}, 0.5));
  kiln::onnx::save_graph(c.model.string(), g, {{"y", add(matmul(x, w), b)}}, nullptr,
                         {.external_data = true});
  std::ifstream f(c.model, std::ios::binary);
  EXPECT_TRUE(c.m.ParseFromIstream(&f));
  return c;
}

::onnx::TensorProto* init_named(::onnx::ModelProto& m, const std::string& name) {
  for (auto& t : *m.mutable_graph()->mutable_initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

void set_ext(::onnx::TensorProto* t, const std::string& key, const std::string& v) {
  for (auto& e : *t->mutable_external_data())
    if (e.key() == key) e.set_value(v);
}

void expect_load_error(const ExternalCase& c, const std::string& part) {
  std::ofstream(c.model, std::ios::binary | std::ios::trunc) << c.m.SerializeAsString();
  try {
    kiln::onnx::load_graph(c.model.string());
    ADD_FAILURE() << "loaded; expected an error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[load_graph]", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    std::cout << "refused: " << e.what() << "\n";
  }
}

TEST(SavedGraphExternal, RoundTripBitForBit) {
  ExternalCase c = external_case("ok");
  ::onnx::TensorProto* w = init_named(c.m, "kiln_var_w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->data_location(), ::onnx::TensorProto::EXTERNAL);
  EXPECT_FALSE(w->has_raw_data());
  // safetensors readers see the same tensors.
  auto st = io::load_safetensors(c.data.string());
  ASSERT_EQ(st.size(), 2u);
  kiln::onnx::LoadedGraph lg = kiln::onnx::load_graph(c.model.string());
  Session s(lg.graph);
  Tensor r = s.run(lg.output("y"), {{lg.input("x"), ones({2, 3})}});
  EXPECT_EQ(r.to_vector<float>(), std::vector<float>(4, 3.5f));
  // From bytes there is no directory to read it from.
  const std::string b = c.m.SerializeAsString();
  EXPECT_THROW(kiln::onnx::load_graph_bytes(b.data(), b.size()), Error);
  // A directory of its own (the model loaded from elsewhere resolves beside the model).
  const fs::path sub = c.dir / "moved";
  fs::create_directories(sub);
  fs::copy_file(c.model, sub / "model.onnx");
  fs::copy_file(c.data, sub / "model.safetensors");
  EXPECT_NO_THROW(kiln::onnx::load_graph((sub / "model.onnx").string()));
  fs::remove_all(c.dir);
}

TEST(SavedGraphExternal, MissingFile) {
  ExternalCase c = external_case("missing");
  fs::remove(c.data);
  expect_load_error(c, "does not exist");
  fs::remove_all(c.dir);
}

TEST(SavedGraphExternal, TruncatedData) {
  ExternalCase c = external_case("truncated");
  fs::resize_file(c.data, fs::file_size(c.data) - 4);
  expect_load_error(c, "truncated");
  fs::remove_all(c.dir);
}

TEST(SavedGraphExternal, WrongDtypeAndShape) {
  ExternalCase c = external_case("dtype");
  ::onnx::TensorProto* w = init_named(c.m, "kiln_var_w");
  w->set_data_type(::onnx::TensorProto::INT32);  // same byte count, another dtype
  expect_load_error(c, "the header of 'model.safetensors' says float32");
  w->set_data_type(::onnx::TensorProto::DOUBLE);
  expect_load_error(c, "external length 24 but float64[3, 2] needs 48 bytes");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->set_dims(0, 2);
  w->set_dims(1, 3);
  expect_load_error(c, "says float32[3, 2]");
  fs::remove_all(c.dir);
}

TEST(SavedGraphExternal, BadOffsetsAndLengths) {
  ExternalCase c = external_case("offsets");
  ::onnx::TensorProto* w = init_named(c.m, "kiln_var_w");
  set_ext(w, "offset", "0");
  expect_load_error(c, "lies in the header");
  set_ext(w, "offset", "99999999999999");
  expect_load_error(c, "run past the end");
  set_ext(w, "offset", "-8");
  expect_load_error(c, "is not a byte count");
  // The bias's bytes under the weight's name: inside the data section, but not its bytes.
  ::onnx::TensorProto* b = init_named(c.m, "kiln_var_b");
  std::string boff;
  for (const auto& e : b->external_data())
    if (e.key() == "offset") boff = e.value();
  set_ext(w, "offset", std::to_string(std::stoll(boff) - 16));
  expect_load_error(c, "does not point at the bytes");
  fs::remove_all(c.dir);
}

TEST(SavedGraphExternal, PathEscapes) {
  ExternalCase c = external_case("escape");
  ::onnx::TensorProto* w = init_named(c.m, "kiln_var_w");
  // A file outside the model's directory, reached four ways.
  const fs::path outside = c.dir.parent_path() / ("kiln_outside_" + std::to_string(getpid()));
  fs::copy_file(c.data, outside, fs::copy_options::overwrite_existing);
  set_ext(w, "location", "../" + outside.filename().string());
  expect_load_error(c, "no '..'");
  set_ext(w, "location", outside.string());
  expect_load_error(c, "no absolute path");
  set_ext(w, "location", "sub/../../" + outside.filename().string());
  expect_load_error(c, "no '..'");
  fs::create_symlink(outside, c.dir / "link.safetensors");
  set_ext(w, "location", "link.safetensors");
  expect_load_error(c, "outside the model's directory");
  set_ext(w, "location", ".");
  expect_load_error(c, "not a regular file");
  fs::remove(outside);
  fs::remove_all(c.dir);
}

TEST(SavedGraphExternal, CorruptSafetensorsHeader) {
  ExternalCase c = external_case("header");
  {
    std::fstream f(c.data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(7);
    f.put(static_cast<char>(0x7f));  // a header length of 2^63 and more
  }
  expect_load_error(c, "is not a valid safetensors file");
  fs::remove_all(c.dir);
}

// Standard tools open saved graphs: onnx.checker accepts the container (Kiln's ops are in the
// ai.kiln domain, which the checker leaves to its owner), here with a while loop and a switch.
TEST(SavedGraph, OnnxCheckerAcceptsTheFile) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 3});
  Tensor n = g.placeholder("n", Int64, {});
  Tensor w = g.variable("w", ones({3, 3}));
  auto fin = while_loop(
      [&](const std::vector<Tensor>& v) { return lt(v[0], n); },
      [&](const std::vector<Tensor>& v) {
        return std::vector<Tensor>{add(v[0], scalar_tensor(1, Int64)), tanh(matmul(v[1], w))};
      },
      {scalar_tensor(0, Int64), x});
  Tensor out = merge(switch_(fin[1], gt(n, 2.0)))[0];
  fs::path dir = fresh_dir("checker");
  const fs::path f = dir / "g.onnx";
  kiln::onnx::save_graph(f.string(), g, {{"out", out}});
  const std::string cmd = std::string(KILN_PYTHON) +
                          " -c 'import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), "
                          "full_check=True); print(\"onnx.checker: ok\")' '" +
                          f.string() + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  fs::remove_all(dir);
}

// fuzz/corpus seeds (fuzz/make_seeds.sh): saved graphs with a while loop and a switch,
// safetensors, .npy and IDX files, small.
void write_seeds(const fs::path& root) {
  manual_seed(9);
  fs::create_directories(root / "saved_graph");
  fs::create_directories(root / "safetensors");
  fs::create_directories(root / "npy");
  fs::create_directories(root / "idx");
  {
    Graph g;
    Tensor x = g.placeholder("x", Float32, {2, 3});
    Tensor w = g.variable("w", randn({3, 2}));
    kiln::onnx::save_graph((root / "saved_graph" / "mlp.onnx").string(), g,
                           {{"y", softmax(relu(matmul(x, w)), -1)}});
  }
  {
    Graph g;
    Tensor x = g.placeholder("x", Float32, {});
    auto s = switch_(x, gt(x, 0.0));
    kiln::onnx::save_graph((root / "saved_graph" / "switch_merge.onnx").string(), g,
                           {{"out", print(merge({neg(s[0]), mul(s[1], 2.0)})[0], "m")}});
  }
  {
    Graph g;
    Tensor x = g.placeholder("x", Float32, {2, 2});
    Tensor n = g.placeholder("n", Int64, {});
    auto fin = while_loop(
        [&](const std::vector<Tensor>& v) { return lt(v[0], n); },
        [&](const std::vector<Tensor>& v) {
          return std::vector<Tensor>{add(v[0], scalar_tensor(1, Int64)), tanh(matmul(v[1], x))};
        },
        {scalar_tensor(0, Int64), x});
    kiln::onnx::save_graph((root / "saved_graph" / "while.onnx").string(), g, {{"h", fin[1]}});
  }
  io::save_safetensors((root / "safetensors" / "two.safetensors").string(),
                       {{"a", randn({2, 3})}, {"b", randint(0, 5, {4})}}, {{"k", "v"}});
  io::save_safetensors((root / "safetensors" / "bool.safetensors").string(),
                       {{"m", gt(randn({3}), 0.0)}});
  io::write_npy((root / "npy" / "f32.npy").string(), randn({2, 3}));
  io::write_npy((root / "npy" / "i64.npy").string(), randint(0, 9, {4}));
  // IDX: magic 0 0 0x08 (ubyte) 2 dims, 2 x 3, then 6 bytes.
  const unsigned char idx[] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
  std::ofstream(root / "idx" / "u8.idx", std::ios::binary)
      .write(reinterpret_cast<const char*>(idx), sizeof idx);
  const unsigned char idx1[] = {0, 0, 8, 1, 0, 0, 0, 4, 9, 8, 7, 6};
  std::ofstream(root / "idx" / "labels.idx", std::ios::binary)
      .write(reinterpret_cast<const char*>(idx1), sizeof idx1);
}

}  // namespace

int main(int argc, char** argv) {
  g_self = fs::canonical("/proc/self/exe").string();
  if (argc == 3 && std::string(argv[1]) == "--child") return run_child(argv[2]) == 0 ? 0 : 1;
  if (argc == 3 && std::string(argv[1]) == "--write-seeds") {
    write_seeds(argv[2]);
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
