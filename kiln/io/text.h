// Character-level text data for language-model training: a fixed 96-symbol vocabulary, the
// Debian `fortunes` corpus, random-window batch sampling and a unigram baseline.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

/// The fixed character vocabulary: id 0 is '\n', ids 1..95 are printable ASCII 32..126 (' '..'~')
/// in order. Encoding maps '\t' to ' ' and drops every other byte (other control characters such
/// as the '\b' overstrikes in fortune files, '\r', and all non-ASCII / UTF-8 bytes), so the same
/// text always gives the same ids and decode(encode(s)) == s for text already in the vocabulary.
const std::string& char_vocab();

/// A character corpus split into train and validation token ids.
struct CharCorpus {
  Tensor train;       ///< int64 [n_train] token ids
  Tensor val;         ///< int64 [n_val] token ids (the last part of the text)
  std::string vocab;  ///< id i <-> vocab[i] (char_vocab())

  int64_t vocab_size() const { return static_cast<int64_t>(vocab.size()); }
  /// Ids (int64 or int32, any shape, read in row-major order) back to text. An id outside
  /// [0, vocab_size) raises kiln::Error.
  std::string decode(const Tensor& ids) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  /// Text to an int64 [n] tensor with the rules of char_vocab().
  Tensor encode(const std::string& text) const;
  /// Cross-entropy (nats per character) of the train unigram distribution on val: the loss a
  /// model that ignores context would reach. See unigram_cross_entropy.
  double unigram_baseline() const;
};

/// Builds a corpus from text: encodes it, and makes the last `val_fraction` of the ids
/// (floor(n * val_fraction)) the validation split. val_fraction must be in [0, 1).
CharCorpus make_char_corpus(const std::string& text, double val_fraction = 0.1);

/// Reads every regular file of `dir` (default: Debian's fortunes package) in sorted name order,
/// skipping subdirectories, hidden files and the index files `*.dat` and `*.u8` (links to the
/// same text), concatenates them and splits with make_char_corpus (last 10% = validation). The
/// text is kept as is, including the "%" lines that separate fortunes. Raises kiln::Error
/// naming the directory when it is missing or holds no text.
CharCorpus load_fortunes(const std::string& dir = "/usr/share/games/fortunes");

/// One language-model batch: y is x shifted by one position (next-token targets).
struct LmBatch {
  Tensor x;  ///< int64 [batch, seq]
  Tensor y;  ///< int64 [batch, seq]
};

/// `batch` random windows of `seq + 1` consecutive ids from 1-D int64 `ids`, start positions
/// uniform over the valid range, drawn from the global generator (reproducible after
/// kiln::manual_seed). Needs ids.numel() >= seq + 1.
LmBatch lm_batch(const Tensor& ids, int64_t batch, int64_t seq);
/// The same with a private generator seeded with `seed` (the same seed gives the same batch).
/// For a stream, use LmSampler.
LmBatch lm_batch(const Tensor& ids, int64_t batch, int64_t seq, uint64_t seed);

/// A seeded stream of lm_batch draws that does not touch the global generator.
class LmSampler {
 public:
  LmSampler(Tensor ids, int64_t batch, int64_t seq, uint64_t seed);
  /// The next batch of the stream.
  LmBatch next();

 private:
  Tensor ids_;
  int64_t batch_, seq_;
  uint64_t state_;
};

/// Deterministic evaluation batches: n * batch windows whose start positions are spread evenly
/// over `ids` (first at 0, last ending at the final id), so they cover the whole split. When the
/// split holds fewer than n * batch * (seq + 1) ids the windows overlap.
std::vector<LmBatch> lm_eval_batches(const Tensor& ids, int64_t batch, int64_t seq, int64_t n);

/// Cross-entropy in nats of the unigram distribution of `train_ids` evaluated on `eval_ids`,
/// with add-one (Laplace) smoothing so a symbol absent from train costs a finite amount.
double unigram_cross_entropy(const Tensor& train_ids, const Tensor& eval_ids, int64_t vocab_size);

}  // namespace kiln::io
