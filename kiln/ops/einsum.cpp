// einsum (torch.einsum): equations with implicit or explicit output and "..." for broadcast
// dims, as a composite over permute, reshape, sum and matmul.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {

// ---- einsum ----------------------------------------------------------------------------------
// Written with permute, reshape, sum and matmul, so gradients, graphs and jit come for free.
// Operands are contracted left to right: for a pair, the labels both have and something later
// needs are batch dims, those only one has are its free dims, those both have and nothing later
// needs are contracted: one batched GEMM [B, L, K] @ [B, K, R]. Labels one operand alone has and
// nothing needs are summed out first. "..." stands for broadcast dims, aligned from the right.

namespace {

struct Term {
  Tensor t;
  std::vector<char> labels;  // one per dim
};

// Sums out the labels of `x` that `keep` does not contain.
Term sum_out(Term x, const std::vector<char>& keep) {
  std::vector<int64_t> dims;
  std::vector<char> rest;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (std::find(keep.begin(), keep.end(), x.labels[d]) == keep.end())
      dims.push_back(static_cast<int64_t>(d));
    else
      rest.push_back(x.labels[d]);
  }
  if (dims.empty()) return x;
  return Term{sum(x.t, dims), rest};
}

// x's dims in the order of `order` (labels x has).
Tensor permuted(const Term& x, const std::vector<char>& order) {
  std::vector<int64_t> perm;
  for (char c : order)
    perm.push_back(std::find(x.labels.begin(), x.labels.end(), c) - x.labels.begin());
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity = identity && perm[i] == static_cast<int64_t>(i);
  return identity ? x.t : permute(x.t, perm);
}

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_ellipsis_label(char c) { return c >= '0' && c <= '9'; }

bool has(const std::vector<char>& v, char c) { return std::find(v.begin(), v.end(), c) != v.end(); }

// The equation's operand subscripts as terms, one label per dim; ellipsis dims get labels '0',
// '1', ... right-aligned across operands ('0' is the first dim of the largest ellipsis).
std::vector<Term> parse_terms(const std::string& equation, const std::string& lhs,
                              const std::vector<Tensor>& operands, int64_t& ell_rank) {
  const char* op = "einsum";
  std::vector<std::string> subs;
  for (size_t a = 0;;) {
    const size_t c = lhs.find(',', a);
    subs.push_back(lhs.substr(a, c == std::string::npos ? std::string::npos : c - a));
    if (c == std::string::npos) break;
    a = c + 1;
  }
  if (subs.size() != operands.size())
    fail(op, "equation '", equation, "' has ", subs.size(), " operands, got ", operands.size(),
         " tensors");
  ell_rank = 0;
  std::vector<Term> terms;
  for (size_t k = 0; k < subs.size(); ++k) {
    const Tensor& t = operands[k];
    if (!t.defined()) fail(op, "operand ", k, " is undefined");
    std::string sub = subs[k];
    const size_t e = sub.find("...");
    std::string before = sub.substr(0, e), after = e == std::string::npos ? "" : sub.substr(e + 3);
    if (e == std::string::npos) before = sub;
    for (char c : before + after)
      if (!is_letter(c))
        fail(op, "bad subscript '", sub, "' in '", equation, "' (letters and one '...' only)");
    const int64_t named = static_cast<int64_t>(before.size() + after.size());
    const int64_t ell = t.dim() - named;
    if (ell < 0 || (e == std::string::npos && ell != 0))
      fail(op, "operand ", k, " has shape ", t.shape(), " but subscript '", sub, "' names ", named,
           " dims");
    ell_rank = std::max(ell_rank, ell);
    Term term{t, {}};
    for (char c : before) term.labels.push_back(c);
    // (placeholders: renumbered below once the largest ellipsis rank is known)
    for (int64_t i = 0; i < ell; ++i) term.labels.push_back('0');
    for (char c : after) term.labels.push_back(c);
    terms.push_back(term);
  }
  if (ell_rank > 10) fail(op, "'...' may stand for at most 10 dims");
  // Ellipsis dims right-aligned: those of a rank-e ellipsis are the last e of the largest.
  for (auto& term : terms) {
    const int64_t ell = std::count_if(term.labels.begin(), term.labels.end(), is_ellipsis_label);
    int64_t i = 0;
    for (char& c : term.labels)
      if (is_ellipsis_label(c)) c = static_cast<char>('0' + (ell_rank - ell + i++));
  }
  return terms;
}

// A label repeated within an operand takes that operand's diagonal ('ii->i', 'ii' the trace), as
// torch: the two dims become one, last.
void take_diagonals(Term& term, const std::string& equation) {
  for (bool again = true; again;) {
    again = false;
    for (size_t d1 = 0; d1 < term.labels.size() && !again; ++d1)
      for (size_t d2 = d1 + 1; d2 < term.labels.size() && !again; ++d2) {
        if (term.labels[d1] != term.labels[d2]) continue;
        const int64_t n1 = term.t.size(static_cast<int64_t>(d1));
        const int64_t n2 = term.t.size(static_cast<int64_t>(d2));
        if (n1 >= 0 && n2 >= 0 && n1 != n2)
          fail("einsum", "label '", term.labels[d1], "' repeats with sizes ", n1, " and ", n2,
               " in an operand of shape ", term.t.shape(), " ('", equation, "')");
        const char c = term.labels[d1];
        term.t = diagonal(term.t, 0, static_cast<int64_t>(d1), static_cast<int64_t>(d2));
        term.labels.erase(term.labels.begin() + static_cast<int64_t>(d2));
        term.labels.erase(term.labels.begin() + static_cast<int64_t>(d1));
        term.labels.push_back(c);
        again = true;
      }
  }
}

// One size per label (size-1 dims broadcast), checked across operands. A dynamic size (-1, in a
// graph) agrees with any; a static one, when known, wins (the ops check it at run time).
std::map<char, int64_t> label_sizes(const std::vector<Term>& terms) {
  std::map<char, int64_t> size;
  for (size_t k = 0; k < terms.size(); ++k) {
    for (size_t d = 0; d < terms[k].labels.size(); ++d) {
      const char c = terms[k].labels[d];
      const int64_t n = terms[k].t.size(static_cast<int64_t>(d));
      auto it = size.find(c);
      if (it == size.end() || it->second == 1 || (it->second < 0 && n >= 0 && n != 1))
        size[c] = n;
      else if (n != 1 && n >= 0 && n != it->second)
        fail("einsum", "label '", c, "' has size ", it->second, " and ", n, " (operand ", k,
             " shape ", terms[k].t.shape(), ")");
    }
  }
  // A size-1 dim broadcast against a dynamic label would need its run-time size.
  for (size_t k = 0; k < terms.size(); ++k)
    for (size_t d = 0; d < terms[k].labels.size(); ++d)
      if (size[terms[k].labels[d]] < 0 && terms[k].t.size(static_cast<int64_t>(d)) == 1)
        fail("einsum", "needs a static size: label '", terms[k].labels[d],
             "' is dynamic and operand ", k, " (shape ", terms[k].t.shape(), ") broadcasts it");
  return size;
}

// The output's labels: the explicit right-hand side, or (implicit) the ellipsis then the letters
// that occur once in the whole equation, sorted; `count` counts every occurrence, so a repeated
// label is summed unless the output names it.
std::vector<char> output_labels(const std::string& equation, const std::string* rhs,
                                int64_t ell_rank, const std::map<char, int64_t>& size,
                                const std::map<char, int64_t>& count) {
  std::vector<char> out;
  if (!rhs) {
    for (int64_t i = 0; i < ell_rank; ++i) out.push_back(static_cast<char>('0' + i));
    for (const auto& [c, n] : count)
      if (is_letter(c) && n == 1) out.push_back(c);
    return out;
  }
  const size_t e = rhs->find("...");
  const std::string before = e == std::string::npos ? *rhs : rhs->substr(0, e);
  const std::string after = e == std::string::npos ? "" : rhs->substr(e + 3);
  for (char c : before) out.push_back(c);
  if (e != std::string::npos)
    for (int64_t i = 0; i < ell_rank; ++i) out.push_back(static_cast<char>('0' + i));
  for (char c : after) out.push_back(c);
  for (size_t i = 0; i < out.size(); ++i) {
    if (!(is_letter(out[i]) || is_ellipsis_label(out[i])))
      fail("einsum", "bad output subscript '", *rhs, "' in '", equation, "'");
    if (!size.count(out[i]))
      fail("einsum", "output label '", out[i], "' appears in no operand of '", equation, "'");
    if (std::find(out.begin(), out.begin() + static_cast<int64_t>(i), out[i]) !=
        out.begin() + static_cast<int64_t>(i))
      fail("einsum", "output label '", out[i], "' repeats in '", equation, "'");
  }
  return out;
}

// Size-1 dims expanded to their label's size.
void broadcast_to_sizes(Term& term, std::map<char, int64_t>& size) {
  Shape want = term.t.shape();
  bool grow = false;
  for (size_t d = 0; d < term.labels.size(); ++d) {
    const int64_t n = size[term.labels[d]];
    if (want[static_cast<int64_t>(d)] < 0) continue;  // dynamic: equal to n at run time
    grow = grow || want[static_cast<int64_t>(d)] != n;
    want[static_cast<int64_t>(d)] = n;
  }
  if (grow) term.t = expand(term.t, want);
}

// acc contracted with b as one batched GEMM [B, L, K] @ [B, K, R]: the labels both have that
// `need` (the output and later operands) holds are batch dims, those both have and nothing
// needs are contracted, the others free; labels one side alone has and nothing needs are
// summed out first.
Term contract_pair(Term acc, Term b, const std::vector<char>& need, std::map<char, int64_t>& size,
                   const std::string& equation) {
  std::vector<char> keep_a = need, keep_b = need;
  for (char c : b.labels) keep_a.push_back(c);
  for (char c : acc.labels) keep_b.push_back(c);
  acc = sum_out(acc, keep_a);
  b = sum_out(b, keep_b);
  std::vector<char> batch, left, right, contract;
  for (char c : acc.labels) {
    if (has(b.labels, c))
      (has(need, c) ? batch : contract).push_back(c);
    else
      left.push_back(c);
  }
  for (char c : b.labels)
    if (!has(acc.labels, c)) right.push_back(c);
  // A group's size; -1 when one of its labels is dynamic (a reshape infers it then).
  auto prod = [&](const std::vector<char>& ls) {
    int64_t p = 1;
    for (char c : ls) {
      if (size[c] < 0) return int64_t(-1);
      p *= size[c];
    }
    return p;
  };
  // Each reshape below can infer one size: one dynamic group per operand, one dynamic label in
  // the product.
  auto dynamic_in = [&](std::initializer_list<const std::vector<char>*> groups, bool labels) {
    int n = 0;
    for (const auto* g : groups) {
      int in_group = 0;
      for (char c : *g) in_group += size[c] < 0;
      n += labels ? in_group : (in_group > 0);
    }
    return n;
  };
  if (dynamic_in({&batch, &left, &contract}, false) > 1 ||
      dynamic_in({&batch, &contract, &right}, false) > 1 ||
      dynamic_in({&batch, &left, &right}, true) > 1)
    fail("einsum", "needs a static size: more than one dynamic label meet in one product of '",
         equation, "'");
  std::vector<char> order_a = batch, order_b = batch;
  order_a.insert(order_a.end(), left.begin(), left.end());
  order_a.insert(order_a.end(), contract.begin(), contract.end());
  order_b.insert(order_b.end(), contract.begin(), contract.end());
  order_b.insert(order_b.end(), right.begin(), right.end());
  const Tensor a3 = reshape(permuted(acc, order_a), {prod(batch), prod(left), prod(contract)});
  const Tensor b3 = reshape(permuted(b, order_b), {prod(batch), prod(contract), prod(right)});
  std::vector<int64_t> rs;
  std::vector<char> labels = batch;
  labels.insert(labels.end(), left.begin(), left.end());
  labels.insert(labels.end(), right.begin(), right.end());
  for (char c : labels) rs.push_back(size[c]);
  return Term{reshape(matmul(a3, b3), Shape(rs)), labels};
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  int64_t ell_rank = 0;
  std::vector<Term> terms = parse_terms(equation, eq.substr(0, arrow), operands, ell_rank);
  std::map<char, int64_t> count;
  for (auto& term : terms) {
    for (char c : term.labels) ++count[c];
    take_diagonals(term, equation);
  }
  std::map<char, int64_t> size = label_sizes(terms);
  const std::string rhs = arrow == std::string::npos ? "" : eq.substr(arrow + 2);
  const std::vector<char> out =
      output_labels(equation, arrow == std::string::npos ? nullptr : &rhs, ell_rank, size, count);
  for (auto& term : terms) broadcast_to_sizes(term, size);
  // Left to right; what operand k's product must keep: the output's labels and later operands'.
  Term acc = terms[0];
  for (size_t k = 1; k < terms.size(); ++k) {
    std::vector<char> need = out;
    for (size_t j = k + 1; j < terms.size(); ++j)
      need.insert(need.end(), terms[j].labels.begin(), terms[j].labels.end());
    acc = contract_pair(acc, terms[k], need, size, equation);
  }
  acc = sum_out(acc, out);
  const Tensor r = permuted(acc, out);
  return r.is_same(operands[0]) ? clone(r) : r;
}

}  // namespace kiln
