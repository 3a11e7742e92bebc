// ONNX converter for TfIdfVectorizer over integer tokens: n-gram counts (with skips) composed of
// comparisons, sums and one matmul onto the output columns, so the shapes stay static.
#include <algorithm>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

// As onnxruntime (whose results the suite holds): in each row, an n-gram of the pool is counted
// at every start i and distance d in 1..max_skip_count+1 where X[i + j d] is its j-th token;
// 1-grams once per position (the distance does not change them). Counts of the n-grams that map
// to one output column add up; TF gives the counts, IDF the weight (or 1) where a count is
// positive, TFIDF count times weight.
KILN_ONNX_OP(TfIdfVectorizer) {
  const Tensor& x0 = n.req(0);
  if (n.has("pool_strings")) n.fail("string pools are not supported (Kiln has no string dtype)");
  if (!is_integral(x0.dtype()) || x0.dtype() == Bool)
    n.fail("X must be int32 or int64 tokens, got ", dtype_name(x0.dtype()));
  if (x0.dim() != 1 && x0.dim() != 2) n.fail("X must be [C] or [N, C], got ", x0.shape());
  if (!x0.shape().is_static()) n.fail("X needs a static shape, got ", x0.shape());
  const Tensor x = x0.dim() == 1 ? unsqueeze(x0, 0) : x0;
  const int64_t B = x.size(0), C = x.size(1);
  const int64_t min_n = n.req_i("min_gram_length"), max_n = n.req_i("max_gram_length");
  const int64_t max_skip = n.req_i("max_skip_count");
  const std::string mode = n.s("mode", "");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF")
    n.fail("mode must be TF, IDF or TFIDF, got '", mode, "'");
  if (min_n < 1 || max_n < min_n || max_skip < 0 || max_skip > 1024)
    n.fail("min_gram_length ", min_n, ", max_gram_length ", max_n, " and max_skip_count ", max_skip,
           " must satisfy 1 <= min <= max and 0 <= skip <= 1024");
  const std::vector<int64_t> pool = n.ints("pool_int64s"), starts = n.ints("ngram_counts"),
                             index = n.ints("ngram_indexes");
  const std::vector<double> weights = n.floats("weights");
  if (static_cast<int64_t>(starts.size()) < max_n)
    n.fail("ngram_counts has ", starts.size(), " starts, max_gram_length is ", max_n);
  if (!weights.empty() && weights.size() != index.size())
    n.fail("weights has ", weights.size(), " values for ", index.size(), " n-grams");
  int64_t cols = 0;
  for (int64_t o : index) {
    if (o < 0 || o >= (int64_t(1) << 24)) n.fail("ngram_indexes value ", o, " is out of range");
    cols = std::max(cols, o + 1);
  }
  check_result_size(n, Shape{B, cols});
  Tensor counts = zeros(Shape{B, cols}, Float32);
  int64_t gram = 0;  // the n-grams' running number, into ngram_indexes and weights
  for (int64_t len = 1; len <= static_cast<int64_t>(starts.size()); ++len) {
    const int64_t lo = starts[len - 1];
    const int64_t hi =
        len < static_cast<int64_t>(starts.size()) ? starts[len] : static_cast<int64_t>(pool.size());
    if (lo < 0 || hi < lo || hi > static_cast<int64_t>(pool.size()) || (hi - lo) % len != 0)
      n.fail("ngram_counts ", len - 1, ": pool items [", lo, ", ", hi, ") are not whole ", len,
             "-grams of the ", pool.size(), "-item pool");
    const int64_t P = (hi - lo) / len;
    if (gram + P > static_cast<int64_t>(index.size()))
      n.fail("ngram_indexes has ", index.size(), " entries, the pool more n-grams");
    if (P > 0 && len >= min_n && len <= max_n) {
      // Output column of each of these n-grams, as a [P, cols] 0/1 matrix.
      std::vector<float> onehot(static_cast<size_t>(P * cols), 0.0f);
      for (int64_t p = 0; p < P; ++p) onehot[static_cast<size_t>(p * cols + index[gram + p])] = 1;
      Tensor to_cols = tensor(onehot, Shape{P, cols});
      Tensor grams = cast(
          tensor(std::vector<int64_t>(pool.begin() + lo, pool.begin() + hi), Shape{1, 1, P, len}),
          x.dtype());
      const int64_t dmax = len == 1 ? 1 : max_skip + 1;
      for (int64_t d = 1; d <= dmax; ++d) {
        const int64_t L = C - (len - 1) * d;  // starts whose n-gram fits in the row
        if (L <= 0) break;
        charge_nodes(n, 2 * len + 6);
        std::vector<Tensor> taps;
        for (int64_t j = 0; j < len; ++j) taps.push_back(slice(x, 1, j * d, j * d + L));
        Tensor windows = unsqueeze(stack(taps, 2), 2);  // [B, L, 1, len]
        Tensor hit = all(eq(windows, grams), {3});      // [B, L, P]
        counts = add(counts, matmul(sum(cast(hit, Float32), {1}), to_cols));
      }
    }
    gram += P;
  }
  Tensor out = counts;
  if (mode != "TF") {
    // Per column weight: an n-gram's weight, the columns' n-grams agreeing or the last winning.
    std::vector<float> w(static_cast<size_t>(cols), 1.0f);
    if (!weights.empty())
      for (size_t g = 0; g < index.size(); ++g)
        w[static_cast<size_t>(index[g])] = static_cast<float>(weights[g]);
    Tensor wt = tensor(w, Shape{cols});
    out = mode == "IDF" ? where(gt(counts, 0.0), expand(wt, Shape{B, cols}), zeros_like(counts))
                        : mul(counts, wt);
  }
  return TL{x0.dim() == 1 ? squeeze(out, 0) : out};
}

}  // namespace
}  // namespace kiln::onnx::detail
