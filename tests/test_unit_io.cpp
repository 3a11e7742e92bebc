// kiln/io: the fortunes character corpus and LM batch sampling, DataLoader epochs and shuffles,
// safetensors round trips, a byte fixture built from the spec and malformed files, and the
// non-terminal progress output.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "kiln/io/data_loader.h"
#include "kiln/io/idx.h"
#include "kiln/io/npy.h"
#include "kiln/io/progress.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/text.h"
#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           str_cat("kiln_io_", ::getpid(), "_", info->test_suite_name(), "_", info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The 8-byte little-endian length prefix of the format.
std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int k = 0; k < 8; ++k) s[k] = static_cast<char>((n >> (8 * k)) & 0xff);
  return s;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Expects load_safetensors(path) to raise kiln::Error whose message names the file and
// contains `what`.
void expect_load_error(const std::string& path, const std::string& what) {
  try {
    io::load_safetensors(path);
    ADD_FAILURE() << "no error for " << what;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[load_safetensors]"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
  }
}

const io::CharCorpus& fortunes() {
  static const io::CharCorpus c = io::load_fortunes();
  return c;
}

}  // namespace

// ---- character corpus ------------------------------------------------------------------------

TEST(CharCorpus, FortunesLoadsWithFixedVocabAndSplit) {
  const io::CharCorpus& c = fortunes();
  EXPECT_EQ(c.vocab_size(), 96);
  EXPECT_EQ(c.vocab[0], '\n');
  EXPECT_EQ(c.vocab[1], ' ');
  EXPECT_EQ(c.vocab[95], '~');
  EXPECT_EQ(c.train.dtype(), Int64);
  EXPECT_EQ(c.val.dtype(), Int64);
  const int64_t n = c.train.numel() + c.val.numel();
  EXPECT_GT(n, 1000000);  // the package holds a few MB of text
  EXPECT_EQ(c.val.numel(), n / 10);
  // Ids stay in range.
  EXPECT_GE(min(c.train).item<int64_t>(), 0);
  EXPECT_LT(max(c.train).item<int64_t>(), 96);
  // Sorted file order: the text starts with the first regular file, filtered by the vocab rules.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    std::string nm = e.path().filename().string();
    if (e.is_regular_file() && !nm.ends_with(".dat") && !nm.ends_with(".u8") && nm[0] != '.')
      names.push_back(e.path().string());
  }
  std::sort(names.begin(), names.end());
  ASSERT_FALSE(names.empty());
  std::string first = c.decode(c.encode(read_bytes(names[0]).substr(0, 300)));
  EXPECT_EQ(c.decode(c.train.slice(0, 0, static_cast<int64_t>(first.size()))), first);
  // The val split continues the train split: both come from one encoded text.
  EXPECT_NE(c.decode(c.val.slice(0, 0, 100)).size(), 0u);
}

TEST(CharCorpus, EncodeDecodeRoundTripAndMappingRules) {
  io::CharCorpus c = io::make_char_corpus("", 0.1);
  EXPECT_EQ(c.train.numel(), 0);
  const std::string& v = io::char_vocab();
  ASSERT_EQ(v.size(), 96u);
  Tensor ids = c.encode(v);
  EXPECT_EQ(ids.to_vector<int64_t>(), arange(0, 96).to_vector<int64_t>());
  EXPECT_EQ(c.decode(ids), v);
  // Tab becomes a space; \r, backspace overstrikes and non-ASCII bytes are dropped.
  EXPECT_EQ(c.decode(c.encode("a\tb\r\nc_\bd caf\xc3\xa9!")), "a b\nc_d caf!");
  EXPECT_EQ(c.decode(std::vector<int64_t>{41, 70, 77, 77, 80}), "Hello");
  EXPECT_EQ(c.decode(tensor(std::vector<int32_t>{41, 70})), "He");
  EXPECT_THROW(c.decode(std::vector<int64_t>{96}), Error);
  EXPECT_THROW(c.decode(std::vector<int64_t>{-1}), Error);
  EXPECT_THROW(c.decode(tensor({1.0f})), Error);
}

TEST(CharCorpus, MakeCorpusSplitsTheTail) {
  io::CharCorpus c = io::make_char_corpus("abcdefghij0123456789", 0.25);
  EXPECT_EQ(c.decode(c.train), "abcdefghij01234");
  EXPECT_EQ(c.decode(c.val), "56789");
  EXPECT_THROW(io::make_char_corpus("abc", 1.0), Error);
  EXPECT_THROW(io::make_char_corpus("abc", -0.1), Error);
}

TEST(CharCorpus, MissingOrEmptyDirectoryNamesIt) {
  try {
    io::load_fortunes("/nonexistent/kiln_fortunes");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kiln_fortunes"), std::string::npos);
  }
  TempDir d;
  write_bytes(d.file("x.dat"), "binary index, skipped");
  fs::create_directories(d.path / "sub");
  try {
    io::load_fortunes(d.path.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(d.path.string()), std::string::npos) << e.what();
  }
}

TEST(CharCorpus, UnigramCrossEntropy) {
  io::CharCorpus c = io::make_char_corpus("");
  Tensor train = c.encode("aab"), val = c.encode("ab");
  // Add-one smoothing over 96 symbols: p(a) = 3/99, p(b) = 2/99.
  const double want = -(std::log(3.0 / 99) + std::log(2.0 / 99)) / 2;
  EXPECT_NEAR(io::unigram_cross_entropy(train, val, 96), want, 1e-12);
  EXPECT_THROW(io::unigram_cross_entropy(train, c.encode(""), 96), Error);
  EXPECT_THROW(io::unigram_cross_entropy(train, val, 10), Error);  // id of 'b' >= 10
  // On the fortunes text: below the uniform log(96) = 4.56 nats, above zero.
  const double h = fortunes().unigram_baseline();
  EXPECT_GT(h, 2.0);
  EXPECT_LT(h, std::log(96.0));
  std::cout << "fortunes: train " << fortunes().train.numel() << " val " << fortunes().val.numel()
            << " chars, unigram baseline " << h << " nats\n";
}

// ---- LM batches ------------------------------------------------------------------------------

TEST(LmBatch, WindowsAreShiftedSlicesOfTheIds) {
  Tensor ids = arange(0, 1000);
  io::LmBatch b = io::lm_batch(ids, 8, 16, 42);
  EXPECT_EQ(b.x.shape(), Shape({8, 16}));
  EXPECT_EQ(b.y.shape(), Shape({8, 16}));
  auto x = b.x.to_vector<int64_t>(), y = b.y.to_vector<int64_t>();
  for (int i = 0; i < 8; ++i) {
    EXPECT_GE(x[i * 16], 0);
    EXPECT_LE(x[i * 16], 1000 - 17);
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(x[i * 16 + t], x[i * 16] + t);  // ids are arange: a window is consecutive
      EXPECT_EQ(y[i * 16 + t], x[i * 16 + t] + 1);
    }
  }
  // Seeded: same seed same batch, other seed other batch.
  EXPECT_EQ(io::lm_batch(ids, 8, 16, 42).x.to_vector<int64_t>(), x);
  EXPECT_NE(io::lm_batch(ids, 8, 16, 43).x.to_vector<int64_t>(), x);
  // Global generator: reproducible after manual_seed.
  manual_seed(7);
  auto g1 = io::lm_batch(ids, 4, 8).x.to_vector<int64_t>();
  manual_seed(7);
  EXPECT_EQ(io::lm_batch(ids, 4, 8).x.to_vector<int64_t>(), g1);
  // A window exactly as long as the data has one start.
  io::LmBatch tight = io::lm_batch(arange(0, 5), 3, 4, 1);
  EXPECT_EQ(tight.y.to_vector<int64_t>(),
            std::vector<int64_t>({1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
  EXPECT_THROW(io::lm_batch(arange(0, 4), 1, 4, 1), Error);
  EXPECT_THROW(io::lm_batch(ids, 0, 4, 1), Error);
  EXPECT_THROW(io::lm_batch(ones({10}), 1, 4, 1), Error);
  EXPECT_THROW(io::lm_batch(arange(0, 10).reshape({2, 5}), 1, 4, 1), Error);
}

TEST(LmBatch, SamplerStreamAndEvalBatches) {
  Tensor ids = arange(0, 500);
  io::LmSampler s1(ids, 4, 8, 9), s2(ids, 4, 8, 9);
  auto a = s1.next().x.to_vector<int64_t>();
  auto b = s1.next().x.to_vector<int64_t>();
  EXPECT_NE(a, b);
  EXPECT_EQ(s2.next().x.to_vector<int64_t>(), a);
  EXPECT_EQ(s2.next().x.to_vector<int64_t>(), b);

  auto ev = io::lm_eval_batches(ids, 4, 8, 3);
  ASSERT_EQ(ev.size(), 3u);
  auto again = io::lm_eval_batches(ids, 4, 8, 3);
  for (size_t i = 0; i < ev.size(); ++i)
    EXPECT_EQ(ev[i].x.to_vector<int64_t>(), again[i].x.to_vector<int64_t>());
  EXPECT_EQ(ev[0].x.at({0, 0}), 0.0);    // first window at the start
  EXPECT_EQ(ev[2].y.at({3, 7}), 499.0);  // last window ends at the last id
  std::set<int64_t> starts;
  for (const auto& e : ev)
    for (int i = 0; i < 4; ++i) starts.insert(static_cast<int64_t>(e.x.at({i, 0})));
  EXPECT_EQ(starts.size(), 12u);  // distinct windows, spread over the split
  EXPECT_THROW(io::lm_eval_batches(ids, 4, 8, 0), Error);
}

// ---- DataLoader ------------------------------------------------------------------------------

TEST(DataLoader, ShuffledEpochCoversEverySampleOnce) {
  Tensor x = arange(0, 20, 1, Float32).reshape({10, 2});  // row i = (2i, 2i+1)
  Tensor y = arange(0, 10);
  io::DataLoader dl({x, y}, 3, /*shuffle=*/true, /*drop_last=*/false, 5);
  EXPECT_EQ(dl.size(), 4);
  std::vector<int64_t> seen;
  int64_t batches = 0;
  for (const std::vector<Tensor>& b : dl) {
    ASSERT_EQ(b.size(), 2u);
    EXPECT_EQ(b[0].size(0), b[1].size(0));
    EXPECT_EQ(b[0].size(0), batches < 3 ? 3 : 1);
    for (int64_t i = 0; i < b[1].size(0); ++i) {
      const int64_t label = static_cast<int64_t>(b[1].at({i}));
      EXPECT_EQ(b[0].at({i, 0}), 2.0 * label);  // rows stay paired with their labels
      seen.push_back(label);
    }
    ++batches;
  }
  EXPECT_EQ(batches, 4);
  EXPECT_EQ(dl.epoch(), 1);
  std::vector<int64_t> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, arange(0, 10).to_vector<int64_t>());
  EXPECT_NE(seen, sorted);  // shuffled (10! orders; identity has probability 3e-7)
}

TEST(DataLoader, DropLastAndOrderPerEpochAndSeed) {
  Tensor y = arange(0, 10);
  io::DataLoader dl({y}, 3, true, /*drop_last=*/true, 11);
  EXPECT_EQ(dl.size(), 3);
  auto epoch_order = [](io::DataLoader& d) {
    std::vector<int64_t> v;
    for (const auto& b : d) {
      auto p = b[0].to_vector<int64_t>();
      v.insert(v.end(), p.begin(), p.end());
    }
    return v;
  };
  auto e0 = epoch_order(dl);
  EXPECT_EQ(e0.size(), 9u);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 9u);
  auto e1 = epoch_order(dl);
  EXPECT_NE(e0, e1);  // a new permutation each epoch
  io::DataLoader same({y}, 3, true, true, 11);
  EXPECT_EQ(epoch_order(same), e0);  // reproducible from the seed
  EXPECT_EQ(epoch_order(same), e1);
  io::DataLoader other({y}, 3, true, true, 12);
  EXPECT_NE(epoch_order(other), e0);
  dl.set_epoch(1);
  EXPECT_EQ(epoch_order(dl), e1);  // set_epoch replays an epoch
  EXPECT_EQ(dl.epoch(), 2);
}

TEST(DataLoader, UnshuffledBatchesAreInOrderViews) {
  Tensor x = arange(0, 14, 1, Float32).reshape({7, 2});
  io::DataLoader dl({x}, 4);
  EXPECT_EQ(dl.size(), 2);
  std::vector<float> all;
  for (const auto& b : dl) {
    EXPECT_TRUE(b[0].shares_storage(x));
    auto v = b[0].to_vector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  EXPECT_EQ(all, x.to_vector<float>());
  EXPECT_EQ(dl.batch(1)[0].shape(), Shape({3, 2}));
  EXPECT_THROW(dl.batch(2), Error);
  io::DataLoader empty_dl({empty({0, 3})}, 4);
  EXPECT_EQ(empty_dl.size(), 0);
  for (const auto& b : empty_dl) ADD_FAILURE() << "no batch expected, got " << b.size();
}

TEST(DataLoader, BadArgumentsRaise) {
  EXPECT_THROW(io::DataLoader({}, 2), Error);
  EXPECT_THROW(io::DataLoader({arange(0, 4)}, 0), Error);
  EXPECT_THROW(io::DataLoader({scalar_tensor(1.0)}, 1), Error);
  EXPECT_THROW(io::DataLoader({Tensor()}, 1), Error);
  try {
    io::DataLoader({zeros({4, 2}), arange(0, 5)}, 2);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 2]"), std::string::npos) << e.what();
  }
  io::DataLoader dl({arange(0, 4)}, 2);
  EXPECT_THROW(dl.set_epoch(-1), Error);
}

// ---- safetensors -----------------------------------------------------------------------------

TEST(Safetensors, RoundTripAllDtypesAndStrides) {
  TempDir d;
  const std::string path = d.file("ckpt.safetensors");
  Tensor f32 = arange(0, 12, 1, Float32).reshape({3, 4}).t();  // non-contiguous
  ASSERT_FALSE(f32.is_contiguous());
  Tensor f64 = tensor(std::vector<double>{1.5, -2.25, 1e300});
  Tensor i64 = tensor(std::vector<int64_t>{INT64_MIN, -1, 0, INT64_MAX}, {2, 2});
  Tensor i32 = tensor(std::vector<int32_t>{7, -8, 9, 10, 11, 12}).reshape({2, 3}).slice(1, 0, 3, 2);
  Tensor b = tensor(std::vector<bool>{true, false, true});
  Tensor s0 = scalar_tensor(3.5, Float32);
  Tensor e0 = zeros({0, 5}, Float64);
  io::NamedTensors in = {{"w.f32", f32}, {"f64", f64},   {"i64", i64}, {"i32", i32},
                         {"mask", b},    {"scalar", s0}, {"empty", e0}};
  io::save_safetensors(path, in, {{"format", "pt"}, {"note", "quote \" and \\ and\nnewline"}});
  EXPECT_FALSE(fs::exists(path + str_cat(".tmp.", ::getpid())));
  io::SafetensorsFile f = io::read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(in[i].first);
    EXPECT_EQ(f.tensors[i].first, in[i].first);  // header order = save order
    const Tensor& got = f.tensors[i].second;
    EXPECT_EQ(got.dtype(), in[i].second.dtype());
    EXPECT_EQ(got.shape(), in[i].second.shape());
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_EQ(got.to_vector<double>(), in[i].second.to_vector<double>());
  }
  EXPECT_EQ(f.tensors[3].second.to_vector<int64_t>(), std::vector<int64_t>({7, 9, 10, 12}));
  EXPECT_EQ(f.tensors[2].second.to_vector<int64_t>()[0], INT64_MIN);  // exact, not via double
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("note"), "quote \" and \\ and\nnewline");
  // Saving over an existing file replaces it.
  io::save_safetensors(path, {{"only", ones({2})}});
  EXPECT_EQ(io::load_safetensors(path).size(), 1u);
}

TEST(Safetensors, WriterBytesFollowTheSpec) {
  TempDir d;
  const std::string path = d.file("a.safetensors");
  io::save_safetensors(path, {{"a", tensor({1.0f, 2.0f})}, {"b", tensor(std::vector<int64_t>{5})}});
  const std::string got = read_bytes(path);
  // Header in the caller's order; data ordered by decreasing element size (the I64 first), so
  // each tensor is aligned to its element size.
  std::string header =
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
      "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
  while (header.size() % 8) header += ' ';
  const std::string want = le64(header.size()) + header + bytes_of(std::vector<int64_t>{5}) +
                           bytes_of(std::vector<float>{1, 2});
  EXPECT_EQ(got, want);
}

TEST(Safetensors, ReadsAFixtureBuiltFromTheSpec) {
  TempDir d;
  const std::string path = d.file("fixture.safetensors");
  // Another writer's choices: metadata first, whitespace, escapes in a name (\u00e9 and a
  // surrogate pair), data stored in a different order than the header lists it, and trailing
  // space padding of the header.
  const std::string header =
      "{ \"__metadata__\" : {\"format\": \"pt\"},\n"
      "  \"caf\\u00e9\\ud83d\\ude00\\\"x\": {\"dtype\": \"I32\", \"shape\": [2, 1], "
      "\"data_offsets\": [3, 11]},\n"
      "  \"m\": {\"data_offsets\": [0, 3], \"shape\": [3], \"dtype\": \"BOOL\"},\n"
      "  \"d\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [11, 19]} }   ";
  const std::string data = std::string("\x01\x00\x01", 3) + bytes_of(std::vector<int32_t>{-3, 4}) +
                           bytes_of(std::vector<double>{0.125});
  write_bytes(path, le64(header.size()) + header + data);
  io::SafetensorsFile f = io::read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.tensors[0].first, "caf\xc3\xa9\xf0\x9f\x98\x80\"x");
  EXPECT_EQ(f.tensors[0].second.dtype(), Int32);
  EXPECT_EQ(f.tensors[0].second.shape(), Shape({2, 1}));
  EXPECT_EQ(f.tensors[0].second.to_vector<int32_t>(), std::vector<int32_t>({-3, 4}));
  EXPECT_EQ(f.tensors[1].first, "m");
  EXPECT_EQ(f.tensors[1].second.to_vector<bool>(), std::vector<bool>({true, false, true}));
  EXPECT_EQ(f.tensors[2].second.dim(), 0);
  EXPECT_EQ(f.tensors[2].second.item<double>(), 0.125);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  // Kiln writes it back and reads the same thing (names with escapes survive).
  io::save_safetensors(d.file("again.safetensors"), f.tensors, f.metadata);
  io::SafetensorsFile g = io::read_safetensors(d.file("again.safetensors"));
  ASSERT_EQ(g.tensors.size(), 3u);
  EXPECT_EQ(g.tensors[0].first, f.tensors[0].first);
  EXPECT_EQ(g.tensors[0].second.to_vector<int32_t>(), std::vector<int32_t>({-3, 4}));
}

TEST(Safetensors, MalformedFilesRaiseNamedErrors) {
  TempDir d;
  int k = 0;
  // Writes header + data with a correct length prefix and returns the path.
  auto file = [&](const std::string& header, const std::string& data) {
    std::string p = d.file(str_cat("bad", k++, ".safetensors"));
    write_bytes(p, le64(header.size()) + header + data);
    return p;
  };
  const std::string f8 = bytes_of(std::vector<float>{1, 2});
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offs) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offs + "}";
  };
  const std::string good = "{" + entry("a", "F32", "[2]", "[0,8]") + "}";
  ASSERT_EQ(io::load_safetensors(file(good, f8)).size(), 1u);  // the baseline is valid

  {  // shorter than the length prefix
    std::string p = d.file("tiny.safetensors");
    write_bytes(p, "abc");
    expect_load_error(p, "truncated");
  }
  {  // the length prefix claims more header than the file holds
    std::string p = d.file("long.safetensors");
    write_bytes(p, le64(4096) + good + f8);
    expect_load_error(p, "header claims 4096 bytes");
  }
  {  // zero and absurd header lengths
    std::string p = d.file("zero.safetensors");
    write_bytes(p, le64(0) + good + f8);
    expect_load_error(p, "bad header length 0");
    write_bytes(p, le64(uint64_t(1) << 60) + good + f8);
    expect_load_error(p, "bad header length");
  }
  {  // data section cut short: offsets run past it
    std::string p = d.file("cut.safetensors");
    write_bytes(p, le64(good.size()) + good + f8.substr(0, 5));
    expect_load_error(p, "run past the data section");
  }
  expect_load_error(file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],", f8), "malformed JSON");
  expect_load_error(file("[1,2]", f8), "must be a JSON object");
  expect_load_error(file(good + "x", f8), "after the JSON object");
  expect_load_error(file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", f8),
                    "expected an integer");
  expect_load_error(file("{\"a\\q\":1}", f8), "bad escape");
  expect_load_error(file("{" + entry("a", "F8_E4M3", "[2]", "[0,4]") + "}", f8),
                    "unsupported dtype \"F8_E4M3\"");
  expect_load_error(file("{" + entry("a", "F32", "[3]", "[0,8]") + "}", f8),
                    "needs 12 bytes but data_offsets [0, 8] hold 8");
  expect_load_error(file("{" + entry("a", "F32", "[-2]", "[0,8]") + "}", f8), "non-negative");
  expect_load_error(file("{" + entry("a", "F32", "[2]", "[0,16]") + "}", f8),
                    "run past the data section");
  expect_load_error(file("{" + entry("a", "F32", "[2]", "[8,0]") + "}", f8), "end before");
  expect_load_error(
      file("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[2,6]") + "}",
           f8),
      "overlap");
  expect_load_error(
      file("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("a", "F32", "[1]", "[4,8]") + "}",
           f8),
      "duplicate key");
  expect_load_error(file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", f8), "needs dtype, shape");
  expect_load_error(
      file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":[]}}", f8),
      "unknown field \"x\"");
  expect_load_error(file("{\"__metadata__\":{\"k\":1}," + good.substr(1), f8), "must be a string");
  expect_load_error(d.file("does_not_exist.safetensors"), "cannot open");
  // Deep nesting is refused, not recursed into.
  expect_load_error(file("{\"a\":" + std::string(200, '[') + std::string(200, ']') + "}", f8),
                    "nested too deeply");
}

TEST(Safetensors, BadSavesLeaveTheOldFile) {
  TempDir d;
  const std::string path = d.file("keep.safetensors");
  io::save_safetensors(path, {{"x", ones({3})}});
  const std::string before = read_bytes(path);
  EXPECT_THROW(io::save_safetensors(path, {{"x", ones({1})}, {"x", ones({1})}}), Error);
  EXPECT_THROW(io::save_safetensors(path, {{"__metadata__", ones({1})}}), Error);
  EXPECT_THROW(io::save_safetensors(path, {{"u", Tensor()}}), Error);
  EXPECT_EQ(read_bytes(path), before);
  try {
    io::save_safetensors(d.file("no/such/dir/x.safetensors"), {{"x", ones({1})}});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir"), std::string::npos) << e.what();
  }
  // Nothing but the one file is left behind.
  int n = 0;
  for (const auto& e : fs::directory_iterator(d.path)) n += e.is_regular_file();
  EXPECT_EQ(n, 1);
}

// ---- progress --------------------------------------------------------------------------------

namespace {
// Runs `fn` with a Progress writing to a temporary file and returns what it wrote.
template <typename Fn>
std::string capture(Fn&& fn) {
  std::FILE* f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  fn(f);
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}
int count(const std::string& s, char c) {
  return static_cast<int>(std::count(s.begin(), s.end(), c));
}
}  // namespace

TEST(Progress, PlainLinesWhenNotATerminal) {
  std::string out = capture([](std::FILE* f) {
    io::ProgressOptions o;
    o.out = f;
    o.seconds_every = 1e9;  // only the percentage triggers lines here
    io::Progress p(100, "train", o);
    EXPECT_FALSE(p.is_bar());  // a file is not a terminal
    for (int s = 1; s <= 100; ++s) p.update(s, {{"loss", 1.0 / s}});
    p.finish();
    p.finish();  // idempotent
  });
  EXPECT_EQ(count(out, '\r'), 0);
  // First step, then every 10%, then the summary.
  EXPECT_EQ(count(out, '\n'), 1 + 10 + 1) << out;
  EXPECT_NE(out.find("train 1/100   1% loss 1 | "), std::string::npos) << out;
  EXPECT_NE(out.find("train 50/100  50% loss 0.02 | "), std::string::npos) << out;
  EXPECT_NE(out.find("it/s | eta "), std::string::npos) << out;
  EXPECT_NE(out.find("train done: 100 steps in "), std::string::npos) << out;
  EXPECT_NE(out.find("loss 0.01\n"), std::string::npos) << out;
}

// A percent step that binary cannot represent (0.1) still prints at every threshold: 1000
// steps at 0.1% each give a line per step (the first step's line is the first threshold's),
// plus the summary the destructor prints.
TEST(Progress, InexactPercentStepMissesNoThreshold) {
  std::string out = capture([](std::FILE* f) {
    io::Progress p(1000, "t",
                   {.mode = io::ProgressOptions::Mode::Lines,
                    .out = f,
                    .percent_every = 0.1,
                    .seconds_every = 1e9});
    for (int s = 1; s < 1000; ++s) p.update(s);
  });
  EXPECT_EQ(count(out, '\n'), 999 + 1);
}

TEST(Progress, BarModeRedrawsOneLine) {
  std::string out = capture([](std::FILE* f) {
    io::ProgressOptions o;
    o.out = f;
    o.mode = io::ProgressOptions::Mode::Bar;
    o.redraw_seconds = 0;
    io::Progress p(4, "", o);
    EXPECT_TRUE(p.is_bar());
    for (int s = 1; s <= 4; ++s) p.update(s, {{"acc", 0.5}});
  });  // the destructor finishes
  EXPECT_EQ(count(out, '\r'), 4);
  EXPECT_EQ(count(out, '\n'), 2);  // end of the bar line, then the summary
  EXPECT_NE(out.find("[########################] 4/4 100% acc 0.5"), std::string::npos) << out;
  EXPECT_NE(out.find("done: 4 steps"), std::string::npos) << out;
}

TEST(Progress, UnknownTotalAndErrors) {
  std::string out = capture([](std::FILE* f) {
    io::ProgressOptions o;
    o.out = f;
    io::Progress p(0, "gen", o);
    p.update(3);
    EXPECT_THROW(p.update(2), Error);
    p.finish();
    EXPECT_THROW(p.update(4), Error);
  });
  EXPECT_NE(out.find("gen step 3 | "), std::string::npos) << out;
  EXPECT_EQ(out.find("eta"), std::string::npos) << out;
  EXPECT_THROW(io::Progress(-1), Error);
  io::ProgressOptions bad;
  bad.percent_every = 0;
  EXPECT_THROW(io::Progress(10, "x", bad), Error);
  EXPECT_EQ(io::format_duration(3725), "1:02:05");
  EXPECT_EQ(io::format_duration(65), "1:05");
  EXPECT_EQ(io::format_duration(5), "5.0s");
  EXPECT_EQ(io::format_duration(42), "42s");
  EXPECT_EQ(io::format_duration(NAN), "?");
}

// ---- bad input found by probing the public API ----------------------------------------------

TEST(IoProbe, SafetensorsNeedsARegularFileAndCountsBytesWithoutWrapping) {
  TempDir d;
  // A directory made the stream throw std::ios_base::failure; /dev/zero was read until memory
  // ran out (std::bad_alloc).
  expect_load_error(d.path.string(), "is not a regular file (it is a directory)");
  expect_load_error("/dev/zero", "is not a regular file");
  expect_load_error(d.file("missing.safetensors"), "cannot open");
  // A FIFO with no writer: refused at once, not waited on (opening it blocked before O_NONBLOCK).
  const std::string fifo = d.file("pipe.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_load_error(fifo, "is not a regular file");
  EXPECT_THROW(io::read_npy(fifo), Error);
  // 2^61 F64 elements need 2^64 bytes, which wrapped to 0 and matched data_offsets [0, 0].
  std::string h =
      "{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
      "\"data_offsets\":[0,0]}}";
  write_bytes(d.file("wrap.safetensors"), le64(h.size()) + h);
  expect_load_error(d.file("wrap.safetensors"), "is too large");
}

TEST(IoProbe, IdxWithZeroRowsOrOddPaths) {
  using kiln_test::expect_error;
  TempDir d;
  // [0, 28, 28] images divided by the zero row count (SIGFPE).
  write_bytes(d.file("empty.idx"), std::string("\0\0\x08\x03\0\0\0\0\0\0\0\x1c\0\0\0\x1c", 16));
  Tensor t = io::read_idx(d.file("empty.idx"));
  EXPECT_EQ(t.shape(), Shape({0, 784}));
  EXPECT_EQ(t.dtype(), Float32);
  // Dims whose product passes 2^64 were reported by [shape], not by the reader.
  write_bytes(d.file("huge.idx"), std::string("\0\0\x08\x04", 4) + std::string(16, '\xff'));
  expect_error([&] { io::read_idx(d.file("huge.idx")); }, "read_idx", {"over 2^64"});
  expect_error([&] { io::read_idx(d.path.string()); }, "read_idx", {"not a regular file"});
  expect_error([] { io::read_idx("/dev/zero"); }, "read_idx", {"not a regular file"});
}

TEST(IoProbe, TextSamplersWithHugeSizes) {
  using kiln_test::expect_error;
  Tensor ids = arange(0, 10, 1, Int64);
  const int64_t max = std::numeric_limits<int64_t>::max();
  // seq + 1 overflowed; the check held only because the optimizer happened to rewrite it.
  expect_error([&] { io::lm_batch(ids, 2, max, 1); }, "lm_batch",
               {"needs more than 9223372036854775807"});
  expect_error([&] { io::LmSampler(ids, 2, max, 1); }, "LmSampler", {"needs more than"});
  expect_error([&] { io::lm_batch(ids, 2, 10, 1); }, "lm_batch", {"10 tokens", "more than 10"});
  // A huge batch sized a std::vector first (std::length_error / std::bad_alloc).
  expect_error([&] { io::lm_batch(ids, max, 3, 1); }, "lm_batch", {"too large", "2^40"});
  expect_error([&] { io::lm_batch(ids, int64_t(1) << 50, 3, 1); }, "lm_batch", {"too large"});
  expect_error([&] { io::LmSampler(ids, int64_t(1) << 50, 3, 1); }, "LmSampler", {"too large"});
  // n * batch overflowed, or reserve() threw std::length_error.
  expect_error([&] { io::lm_eval_batches(ids, 2, 3, max); }, "lm_eval_batches", {"too large"});
  expect_error([&] { io::lm_eval_batches(ids, int64_t(1) << 32, 3, int64_t(1) << 32); },
               "lm_eval_batches", {"too large"});
  // A huge vocab_size sized a table of that many doubles; the value depends on it only through
  // the smoothing total.
  Tensor train = tensor(std::vector<int64_t>{0, 1, 1, 2}),
         eval = tensor(std::vector<int64_t>{1, 3});
  const double v = std::ldexp(1.0, 40);
  const double want = -(std::log(3.0 / (4 + v)) + std::log(1.0 / (4 + v))) / 2;
  EXPECT_NEAR(io::unigram_cross_entropy(train, eval, int64_t(1) << 40), want, 1e-9);
  EXPECT_NEAR(io::unigram_cross_entropy(train, eval, 4),
              -(std::log(3.0 / 8) + std::log(1.0 / 8)) / 2, 1e-12);
  Tensor sparse_train = tensor(std::vector<int64_t>{int64_t(1) << 39, 0});
  Tensor sparse_eval = tensor(std::vector<int64_t>{int64_t(1) << 39});
  EXPECT_NEAR(io::unigram_cross_entropy(sparse_train, sparse_eval, int64_t(1) << 40),
              -std::log(2.0 / (2 + v)), 1e-9);
}

TEST(IoProbe, DataLoaderWithHugeBatchOrEpoch) {
  using kiln_test::expect_error;
  const int64_t max = std::numeric_limits<int64_t>::max();
  // (n + batch - 1) / batch overflowed to 0 batches.
  io::DataLoader dl({arange(0, 4, 1, Int64)}, max);
  ASSERT_EQ(dl.size(), 1);
  EXPECT_EQ(dl.batch(0)[0].shape(), Shape({4}));
  io::DataLoader drop({arange(0, 4, 1, Int64)}, max, false, true);
  EXPECT_EQ(drop.size(), 0);
  // epoch + 1 overflowed at the next begin().
  expect_error([&] { dl.set_epoch(max); }, "DataLoader", {"epoch"});
}

TEST(IoProbe, ProgressWithATinyPercentStepEnds) {
  // The threshold loop added 1e-20 until it passed 50 (or forever once the sum stopped moving).
  for (double every : {1e-20, 1e-300}) {
    std::FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    {
      io::Progress p(10, "t",
                     {.mode = io::ProgressOptions::Mode::Lines, .out = f, .percent_every = every});
      p.update(5);
      p.update(6);
    }
    std::fclose(f);
  }
  // llround had no int64 answer and printed a negative count of seconds.
  EXPECT_EQ(io::format_duration(1e300), "?");
  EXPECT_EQ(io::format_duration(1e19), "?");
}
