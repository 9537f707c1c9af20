// Internal to the ONNX op implementations (onnx_ops.cpp, onnx_ops_nn.cpp, onnx_rnn.cpp): one
// node's inputs and attributes as the op table's functions read them, and the op families that
// live in their own files.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/ops.h"
#include "models/onnx_ops.h"

namespace hg::models::onnx_detail {

using Json = nlohmann::json;
using Ts = std::vector<Tensor>;

struct Ctx {
  const OpNode& n;
  const Ts& in;
  int64_t batch;

  [[noreturn]] void fail(const std::string& why) const {
    throw InvalidArgument("ONNX node '" + n.name + "' (op " + n.op + "): " + why);
  }
  bool has(size_t slot) const { return slot < in.size() && in[slot].defined(); }
  const Tensor& x(size_t slot) const {
    if (!has(slot)) fail("input " + std::to_string(slot) + " is missing");
    return in[slot];
  }
  bool has_attr(const char* k) const { return n.attrs.contains(k); }
  int64_t i(const char* k, int64_t dflt) const {
    auto it = n.attrs.find(k);
    if (it == n.attrs.end()) return dflt;
    if (!it->is_number_integer()) fail(std::string("attribute '") + k + "' is not an integer");
    return it->get<int64_t>();
  }
  double f(const char* k, double dflt) const {
    auto it = n.attrs.find(k);
    if (it == n.attrs.end()) return dflt;
    if (!it->is_number()) fail(std::string("attribute '") + k + "' is not a number");
    return it->get<double>();
  }
  std::string s(const char* k, const std::string& dflt) const {
    auto it = n.attrs.find(k);
    if (it == n.attrs.end()) return dflt;
    if (!it->is_string()) fail(std::string("attribute '") + k + "' is not a string");
    return it->get<std::string>();
  }
  // An integer list; {"batch": a, "plus": c} entries resolve to a * batch + c.
  std::vector<int64_t> ints(const char* k) const {
    std::vector<int64_t> r;
    auto it = n.attrs.find(k);
    if (it == n.attrs.end()) return r;
    if (!it->is_array()) fail(std::string("attribute '") + k + "' is not a list");
    for (const Json& e : *it) {
      if (e.is_number_integer()) r.push_back(e.get<int64_t>());
      else if (e.is_object() && e.value("batch", Json()).is_number_integer() && e.value("plus", Json()).is_number_integer())
        r.push_back(linear(e["batch"].get<int64_t>(), e["plus"].get<int64_t>(), k));
      else fail(std::string("attribute '") + k + "' has a non-integer entry " + e.dump());
    }
    return r;
  }
  int64_t linear(int64_t slope, int64_t plus, const char* k) const {
    int64_t v;
    if (__builtin_mul_overflow(slope, batch, &v) || __builtin_add_overflow(v, plus, &v))
      fail(std::string("attribute '") + k + "': " + std::to_string(slope) + " * batch " + std::to_string(batch) + " + " +
           std::to_string(plus) + " overflows");
    return v;
  }
  // The element count of a shape this node allocates; fails beyond kMaxOnnxElements.
  int64_t numel_capped(const Shape& s) const {
    const auto n = capped_numel(s);
    if (!n) fail("shape " + shape_str(s) + " has a negative dimension or more than " + std::to_string(kMaxOnnxElements) +
                 " elements");
    return *n;
  }
  std::vector<double> reals(const char* k) const {
    std::vector<double> r;
    auto it = n.attrs.find(k);
    if (it == n.attrs.end()) return r;
    if (!it->is_array()) fail(std::string("attribute '") + k + "' is not a list");
    for (const Json& e : *it) {
      if (!e.is_number()) fail(std::string("attribute '") + k + "' has a non-numeric entry " + e.dump());
      r.push_back(e.get<double>());
    }
    return r;
  }
  int64_t axis(int64_t a, int64_t rank) const {
    if (a < -rank || a >= rank) fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    return a < 0 ? a + rank : a;
  }
};

using OpFn = std::function<Ts(const Ctx&)>;

// onnx_ops_nn.cpp: activations built from relu, pads, pooling's ceil mode, resizes.
Tensor constant_like(const Tensor& x, double v);
Ts clip(const Ctx& c);
Tensor hard_sigmoid(const Tensor& x, double alpha, double beta);
Ts pad(const Ctx& c);
Tensor ceil_pad(const Ctx& c, Tensor x, ops::Size2 k, ops::Size2 s, ops::Size2 p);
Ts resize(const Ctx& c);

// onnx_rnn.cpp: LSTM, GRU and RNN, unrolled over the concrete sequence length.
Ts lstm(const Ctx& c);
Ts gru(const Ctx& c);
Ts rnn(const Ctx& c);

// onnx_einsum.cpp: Einsum as permutes, reshapes and one batched matmul.
Ts einsum(const Ctx& c);

}  // namespace hg::models::onnx_detail
