// Character corpus, fortunes loader, LM batch sampling and the unigram baseline. Sampling runs
// as host loops over the id buffer: a batch is a few thousand int64 copies, cheaper than ops.
#include "kiln/io/text.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "kiln/io/rng.h"

namespace kiln::io {
namespace {

// Byte -> id, -1 when the byte is dropped.
struct CharTable {
  int16_t id[256];
  CharTable() {
    for (int b = 0; b < 256; ++b) id[b] = -1;
    id[static_cast<unsigned char>('\n')] = 0;
    for (int c = 32; c <= 126; ++c) id[c] = static_cast<int16_t>(c - 31);
    id[static_cast<unsigned char>('\t')] = id[static_cast<unsigned char>(' ')];
  }
};
const CharTable& table() {
  static const CharTable t;
  return t;
}

// A concrete 1-D integer tensor's ids as int64 values (shared data when already int64 and
// contiguous).
Tensor ids_1d(const Tensor& ids, const char* op) {
  if (!ids.defined() || !ids.is_concrete()) fail(op, "ids must be a concrete tensor");
  if (ids.dtype() != Int64)
    fail(op, "ids must be int64, got ", ids.dtype(), " with shape ", ids.shape());
  if (ids.dim() != 1) fail(op, "ids must be 1-D, got shape ", ids.shape());
  return ids.is_contiguous() ? ids : raw_contiguous_copy(ids);
}

void check_window(const Tensor& ids, int64_t batch, int64_t seq, const char* op) {
  if (batch <= 0 || seq <= 0)
    fail(op, "batch and seq must be positive, got batch ", batch, ", seq ", seq);
  // Compared as seq >= numel, not numel < seq + 1, which overflows for seq = 2^63 - 1.
  if (seq >= ids.numel())
    fail(op, "ids has ", ids.numel(), " tokens; a window of seq ", seq, " needs more than ", seq,
         " tokens");
  // Past this the [batch, seq] outputs could not be held anyway; say so in this op's name.
  constexpr int64_t kMaxTokens = int64_t(1) << 40;
  if (batch > kMaxTokens / seq)
    fail(op, "batch ", batch, " x seq ", seq, " is too large (at most 2^40 tokens per batch)");
}

// Copies the windows starting at start(i), i < b, into x and y. The [b, seq] outputs are
// allocated first, so a batch too large to hold raises before anything else is sized by it.
template <typename Start>
LmBatch gather_windows(const Tensor& ids, int64_t b, int64_t seq, Start&& start) {
  LmBatch out{empty({b, seq}, Int64), empty({b, seq}, Int64)};
  const int64_t* src = ids.data_ptr<int64_t>();
  int64_t* x = out.x.data_ptr<int64_t>();
  int64_t* y = out.y.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t s = start(i);
    std::copy_n(src + s, seq, x + i * seq);
    std::copy_n(src + s + 1, seq, y + i * seq);
  }
  return out;
}

template <typename Next>
LmBatch random_batch(const Tensor& ids0, int64_t batch, int64_t seq, Next&& next_below) {
  Tensor ids = ids_1d(ids0, "lm_batch");
  check_window(ids, batch, seq, "lm_batch");
  const uint64_t range = static_cast<uint64_t>(ids.numel() - seq);  // valid starts: [0, range)
  return gather_windows(ids, batch, seq,
                        [&](int64_t) { return static_cast<int64_t>(next_below(range)); });
}

}  // namespace

const std::string& char_vocab() {
  static const std::string v = [] {
    std::string s = "\n";
    for (int c = 32; c <= 126; ++c) s.push_back(static_cast<char>(c));
    return s;
  }();
  return v;
}

std::string CharCorpus::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  s.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size())
      fail("decode", "id ", ids[i], " at position ", i, " is outside the vocabulary [0, ",
           vocab_size(), ")");
    s.push_back(vocab[static_cast<size_t>(ids[i])]);
  }
  return s;
}

std::string CharCorpus::decode(const Tensor& ids) const {
  if (!ids.defined() || !ids.is_concrete()) fail("decode", "ids must be a concrete tensor");
  if (!is_integral(ids.dtype()))
    fail("decode", "ids must be int64 or int32, got ", ids.dtype(), " with shape ", ids.shape());
  return decode(ids.to_vector<int64_t>());
}

Tensor CharCorpus::encode(const std::string& text) const {
  const CharTable& t = table();
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text)
    if (t.id[c] >= 0) ids.push_back(t.id[c]);
  if (ids.empty()) return empty({0}, Int64);
  return tensor(ids);
}

double CharCorpus::unigram_baseline() const {
  return unigram_cross_entropy(train, val, vocab_size());
}

CharCorpus make_char_corpus(const std::string& text, double val_fraction) {
  if (!(val_fraction >= 0 && val_fraction < 1))
    fail("make_char_corpus", "val_fraction must be in [0, 1), got ", val_fraction);
  CharCorpus c;
  c.vocab = char_vocab();
  Tensor all = c.encode(text);
  const int64_t n = all.numel();
  const int64_t n_val = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
  // Copies, so the splits do not keep each other's storage alive.
  c.train = raw_contiguous_copy(make_view(all, {n - n_val}, {1}, 0));
  c.val = raw_contiguous_copy(make_view(all, {n_val}, {1}, n - n_val));
  return c;
}

CharCorpus load_fortunes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("load_fortunes", "'", dir,
         "' is not a directory (install Debian's 'fortunes' package, or pass the directory)");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    auto ends_with = [&](const char* suf) {
      const std::string s(suf);
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (name.empty() || name[0] == '.' || ends_with(".dat") || ends_with(".u8")) continue;
    std::error_code ec2;
    if (e.is_regular_file(ec2)) files.push_back(e.path());
  }
  if (ec) fail("load_fortunes", "cannot list '", dir, "': ", ec.message());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& p : files) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail("load_fortunes", "cannot read '", p.string(), "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    text += ss.str();
  }
  CharCorpus c = make_char_corpus(text, 0.1);
  if (c.train.numel() == 0 || c.val.numel() == 0)
    fail("load_fortunes", "'", dir, "' holds no text (", files.size(),
         " files after skipping *.dat, *.u8 and subdirectories)");
  return c;
}

LmBatch lm_batch(const Tensor& ids, int64_t batch, int64_t seq) {
  return random_batch(ids, batch, seq, [](uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
      uint64_t r = random_u64();
      if (r < limit) return r % n;
    }
  });
}

LmBatch lm_batch(const Tensor& ids, int64_t batch, int64_t seq, uint64_t seed) {
  SplitMix64 g(seed);
  return random_batch(ids, batch, seq, [&](uint64_t n) { return g.below(n); });
}

LmSampler::LmSampler(Tensor ids, int64_t batch, int64_t seq, uint64_t seed)
    : ids_(ids_1d(ids, "LmSampler")), batch_(batch), seq_(seq), state_(seed) {
  check_window(ids_, batch, seq, "LmSampler");
}

LmBatch LmSampler::next() {
  SplitMix64 g(state_);
  LmBatch b = random_batch(ids_, batch_, seq_, [&](uint64_t n) { return g.below(n); });
  state_ = g.next();
  return b;
}

std::vector<LmBatch> lm_eval_batches(const Tensor& ids0, int64_t batch, int64_t seq, int64_t n) {
  Tensor ids = ids_1d(ids0, "lm_eval_batches");
  check_window(ids, batch, seq, "lm_eval_batches");
  if (n <= 0) fail("lm_eval_batches", "n must be positive, got ", n);
  // Every window is 2 * seq int64 values; a request past 2^60 of them cannot be held, and
  // bounding it here keeps the index arithmetic below from overflowing.
  int64_t windows = 0, values = 0;
  if (__builtin_mul_overflow(n, batch, &windows) || __builtin_mul_overflow(windows, seq, &values) ||
      values > (int64_t(1) << 60))
    fail("lm_eval_batches", "n * batch * seq = ", n, " * ", batch, " * ", seq, " is too large");
  const int64_t last = ids.numel() - seq - 1;  // last valid start
  std::vector<LmBatch> out;
  try {
    out.reserve(static_cast<size_t>(n));
  } catch (const std::exception&) {
    fail("lm_eval_batches", "cannot hold n = ", n, " batches");
  }
  for (int64_t b = 0; b < n; ++b) {
    out.push_back(gather_windows(ids, batch, seq, [&](int64_t i) {
      const int64_t k = b * batch + i;
      // Evenly spaced in [0, last], exactly: k * last can pass 2^63, so in 128 bits.
      return windows == 1 ? 0
                          : static_cast<int64_t>(static_cast<__int128>(k) * last / (windows - 1));
    }));
  }
  return out;
}

double unigram_cross_entropy(const Tensor& train0, const Tensor& eval0, int64_t vocab_size) {
  const char* op = "unigram_cross_entropy";
  if (vocab_size <= 0) fail(op, "vocab_size must be positive, got ", vocab_size);
  Tensor train = ids_1d(train0, op), eval = ids_1d(eval0, op);
  if (eval.numel() == 0) fail(op, "eval ids are empty");
  auto check = [&](int64_t id, const char* which) {
    if (id < 0 || id >= vocab_size)
      fail(op, which, " id ", id, " is outside [0, ", vocab_size, ")");
  };
  const int64_t* t = train.data_ptr<int64_t>();
  const int64_t* e = eval.data_ptr<int64_t>();
  for (int64_t i = 0; i < train.numel(); ++i) check(t[i], "train");
  for (int64_t i = 0; i < eval.numel(); ++i) check(e[i], "eval");
  // Counts start at 1 (add-one smoothing). A table indexed by id is sized by the largest id
  // present, not by vocab_size (which may be huge); when even that is far larger than the data
  // (sparse huge ids) the counts go in a hash map instead.
  const int64_t nt = train.numel();
  int64_t max_id = 0;
  for (int64_t i = 0; i < nt; ++i) max_id = std::max(max_id, t[i]);
  const bool dense = max_id < 4 * nt + 4096;
  std::vector<double> table(dense ? static_cast<size_t>(max_id) + 1 : 0, 1.0);
  std::unordered_map<int64_t, double> sparse;
  for (int64_t i = 0; i < nt; ++i) {
    if (dense)
      table[static_cast<size_t>(t[i])] += 1;
    else
      sparse.try_emplace(t[i], 1.0).first->second += 1;
  }
  auto count = [&](int64_t id) {
    if (dense) return id <= max_id ? table[static_cast<size_t>(id)] : 1.0;
    auto it = sparse.find(id);
    return it == sparse.end() ? 1.0 : it->second;
  };
  const double total = static_cast<double>(nt) + static_cast<double>(vocab_size);
  double nll = 0;
  for (int64_t i = 0; i < eval.numel(); ++i) nll -= std::log(count(e[i]) / total);
  return nll / static_cast<double>(eval.numel());
}

}  // namespace kiln::io
