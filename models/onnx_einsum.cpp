// ONNX Einsum as permutes, reshapes and at most one batched matmul: one or two operands, explicit
// ("bhid,bhjd->bhij") or implicit output, '...' for broadcast dimensions, spaces ignored (torch
// writes "B G H I D, B G H J D -> B G H I J"). Labels only one operand has and the output lacks
// are summed first; labels both operands share are the matmul's batch (kept in the output) or
// its contraction (not kept). A label repeated within one operand (a diagonal) is refused.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "models/onnx_ctx.h"

namespace hg::models::onnx_detail {
namespace {

using Labels = std::string;

// `term` with its "..." replaced by one label per broadcast dimension ('0' the last, '1' the one
// before, ...), for an operand of `rank` dimensions; `width` receives their count.
Labels expand_ellipsis(const Ctx& c, const std::string& term, int64_t rank, int64_t* width) {
  const size_t at = term.find("...");
  const int64_t letters = static_cast<int64_t>(term.size()) - (at == std::string::npos ? 0 : 3);
  for (size_t k = 0; k < term.size(); ++k)
    if (!std::isalpha(static_cast<unsigned char>(term[k])) && (at == std::string::npos || k < at || k >= at + 3))
      c.fail("equation term '" + term + "': '" + std::string(1, term[k]) + "' is not a letter");
  *width = at == std::string::npos ? 0 : rank - letters;
  if (*width < 0 || (at == std::string::npos && letters != rank))
    c.fail("equation term '" + term + "' has " + std::to_string(letters) + " labels for an operand of rank " +
           std::to_string(rank));
  if (at == std::string::npos) return term;
  Labels dots;
  for (int64_t j = *width; j-- > 0;) dots += static_cast<char>('0' + j);
  return term.substr(0, at) + dots + term.substr(at + 3);
}

bool has(const Labels& l, char x) { return l.find(x) != std::string::npos; }

// x permuted from `from` to `to` (the same labels).
Tensor arrange(const Tensor& x, const Labels& from, const Labels& to) {
  std::vector<int64_t> perm;
  for (char l : to) perm.push_back(static_cast<int64_t>(from.find(l)));
  for (size_t k = 0; k < perm.size(); ++k)
    if (perm[k] != static_cast<int64_t>(k)) return ops::permute(x, perm);
  return x;
}

// x with the labels the output and `other` lack summed away; `l` follows.
Tensor sum_private(const Tensor& x, Labels& l, const Labels& other, const Labels& out) {
  std::vector<int64_t> axes;
  Labels kept;
  for (size_t k = 0; k < l.size(); ++k) {
    if (has(out, l[k]) || has(other, l[k])) kept += l[k];
    else axes.push_back(static_cast<int64_t>(k));
  }
  l = kept;
  return axes.empty() ? x : ops::sum(x, axes, false);
}

}  // namespace

Ts einsum(const Ctx& c) {
  std::string eq;
  for (char ch : c.s("equation", "")) eq += ch == ' ' ? "" : std::string(1, ch);
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  for (size_t from = 0;;) {
    const size_t comma = eq.find(',', from);
    const size_t end = std::min(comma, arrow);
    terms.push_back(eq.substr(from, end - from));
    if (comma == std::string::npos || comma > arrow) break;
    from = comma + 1;
  }
  if (terms.size() != c.in.size()) c.fail("equation '" + eq + "' has " + std::to_string(terms.size()) + " terms for " +
                                           std::to_string(c.in.size()) + " inputs");
  if (terms.empty() || terms.size() > 2) c.fail("one or two operands are supported, got " + std::to_string(terms.size()));
  std::vector<Labels> l;
  std::vector<Tensor> x;
  int64_t dots = 0;
  std::map<char, int64_t> size;
  Labels broadcast;  // labels of size 1 in one operand and larger in the other
  for (size_t k = 0; k < terms.size(); ++k) {
    int64_t w = 0;
    x.push_back(c.x(k));
    l.push_back(expand_ellipsis(c, terms[k], x[k].ndim(), &w));
    dots = std::max(dots, w);
    for (size_t d = 0; d < l[k].size(); ++d) {
      if (l[k].find(l[k][d]) != d) c.fail("label '" + std::string(1, l[k][d]) + "' repeats in term '" + terms[k] +
                                          "' (a diagonal): not supported");
      const int64_t n = x[k].shape()[d];
      auto [it, fresh] = size.emplace(l[k][d], n);
      if (!fresh && it->second != n) {
        if (it->second != 1 && n != 1)
          c.fail("label '" + std::string(1, l[k][d]) + "' is " + std::to_string(it->second) + " in one operand and " +
                 std::to_string(n) + " in another");
        broadcast += l[k][d];
      }
      it->second = std::max(it->second, n);
    }
  }
  Labels dims;
  for (int64_t j = dots; j-- > 0;) dims += static_cast<char>('0' + j);
  Labels out;
  if (arrow != std::string::npos) {
    int64_t w = 0;
    const std::string rhs = eq.substr(arrow + 2);
    out = expand_ellipsis(c, rhs, static_cast<int64_t>(rhs.size() - (rhs.find("...") == std::string::npos ? 0 : 3)) + dots,
                          &w);
    for (size_t d = 0; d < out.size(); ++d) {
      if (out.find(out[d]) != d) c.fail("output label '" + std::string(1, out[d]) + "' repeats");
      if (!size.count(out[d])) c.fail("output label '" + std::string(1, out[d]) + "' is in no input");
    }
  } else {  // implicit: the broadcast dims, then the labels that appear once, alphabetically
    std::map<char, int> count;
    for (const Labels& t : l)
      for (char ch : t) count[ch]++;
    out = dims;
    for (auto [ch, n] : count)
      if (n == 1 && std::isalpha(static_cast<unsigned char>(ch))) out += ch;
  }
  if (x.size() == 1) {
    x[0] = sum_private(x[0], l[0], "", out);
    return {arrange(x[0], l[0], out)};
  }
  x[0] = sum_private(x[0], l[0], l[1], out);
  x[1] = sum_private(x[1], l[1], l[0], out);
  // batch: in both and the output (output order); contracted: in both, not the output;
  // left / right: one operand's, in its order.
  Labels batch, contract, left, right;
  for (char ch : out)
    if (has(l[0], ch) && has(l[1], ch)) batch += ch;
  for (char ch : l[0]) {
    if (!has(l[1], ch)) left += ch;
    else if (!has(out, ch)) contract += ch;
  }
  for (char ch : l[1])
    if (!has(l[0], ch)) right += ch;
  for (char ch : broadcast)  // a size-1 dimension against a larger one: only a batch label broadcasts
    if (!has(batch, ch)) c.fail("label '" + std::string(1, ch) + "' has different sizes in the two operands");
  auto product = [&](const Labels& ls) {
    int64_t n = 1;
    for (char ch : ls) n *= size.at(ch);
    return n;
  };
  // Each operand as [batch..., rows, cols]; transposed in the matmul instead of copied when its
  // own order is already [batch..., cols, rows].
  auto operand = [&](const Tensor& t, const Labels& own, const Labels& rows, const Labels& cols, bool* trans) {
    *trans = own == batch + cols + rows && own != batch + rows + cols;
    const Labels order = *trans ? batch + cols + rows : batch + rows + cols;
    Shape s;
    for (char ch : batch) s.push_back(t.shape()[own.find(ch)]);
    s.push_back(product(*trans ? cols : rows));
    s.push_back(product(*trans ? rows : cols));
    return ops::reshape(ops::contiguous(arrange(t, own, order)), s);
  };
  bool ta = false, tb = false;
  const Tensor a = operand(x[0], l[0], left, contract, &ta);
  const Tensor b = operand(x[1], l[1], contract, right, &tb);
  Tensor y = ops::matmul(a, b, ta, tb);
  Shape s;
  for (char ch : batch + left + right) s.push_back(size.at(ch));
  y = ops::reshape(ops::contiguous(y), s);
  return {arrange(y, batch + left + right, out)};
}

}  // namespace hg::models::onnx_detail
