// ONNX LSTM, GRU and RNN (as torch.onnx.export writes nn.LSTM / nn.GRU / nn.RNN: one node per
// layer, forward, reverse or bidirectional, with or without initial states, either layout):
// per direction, the input projection of every step is one matmul and the sequence loop one
// `recurrent` op (engine/ops_recurrent.h), so a captured graph replays the loop inside one
// kernel. Default activations (and an RNN's relu) only; no clip, peepholes, input_forget or
// sequence_lens.
#include <string>
#include <vector>

#include "engine/ops_recurrent.h"
#include "models/onnx_ctx.h"

namespace hg::models::onnx_detail {
namespace {

enum class Cell { Lstm, Gru, Rnn };

int gates(Cell k) { return k == Cell::Lstm ? 4 : k == Cell::Gru ? 3 : 1; }

// The cell's activation per direction: the defaults (LSTM sigmoid, tanh, tanh; GRU sigmoid,
// tanh; RNN tanh), or an RNN's relu. True: relu.
bool check(const Ctx& c, Cell k, int64_t dirs) {
  if (c.has_attr("activation_alpha") || c.has_attr("activation_beta")) c.fail("activation_alpha/beta are not supported");
  std::vector<std::string> given, want;
  if (c.has_attr("activations")) {
    const Json& a = c.n.attrs["activations"];
    if (!a.is_array()) c.fail("attribute 'activations' is not a list of names");
    for (const Json& e : a) given.push_back(e.is_string() ? e.get<std::string>() : "");
  }
  const std::vector<std::string> one = k == Cell::Lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                       : k == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                        : std::vector<std::string>{"Tanh"};
  for (int64_t d = 0; d < dirs; ++d) want.insert(want.end(), one.begin(), one.end());
  bool relu = false;
  if (k == Cell::Rnn && !given.empty() && given == std::vector<std::string>(static_cast<size_t>(dirs), "Relu")) relu = true;
  else if (!given.empty() && given != want) c.fail("activations other than the defaults (and an RNN's Relu) are not supported");
  if (c.has_attr("clip")) c.fail("clip is not supported");
  if (c.i("input_forget", 0)) c.fail("input_forget is not supported");
  if (c.has(4)) c.fail("sequence_lens is not supported (every sequence has the input's length)");
  if (k == Cell::Lstm && c.has(7)) c.fail("peepholes (input P) are not supported");
  return relu;
}

}  // namespace

// One direction d of the node over x [seq, batch, input]: the hidden state of every step
// [seq, batch, hidden] (in time order) and the last hidden (and cell) state [batch, hidden].
static Ts run_direction(const Ctx& c, Cell k, bool relu, const Tensor& x, int64_t d, bool reverse, const Tensor& h0,
                        const Tensor& c0) {
  const int64_t hs = c.i("hidden_size", 0), seq = x.shape()[0], g = gates(k);
  const Tensor w = ops::reshape(ops::slice(c.x(1), 0, d, d + 1), {g * hs, x.shape()[2]});
  const Tensor r = ops::reshape(ops::slice(c.x(2), 0, d, d + 1), {g * hs, hs});
  Tensor wb, rb;
  if (c.has(3)) {
    const Tensor b = ops::reshape(ops::slice(c.x(3), 0, d, d + 1), {2 * g * hs});
    wb = ops::slice(b, 0, 0, g * hs), rb = ops::slice(b, 0, g * hs, 2 * g * hs);
  }
  // Every step's input projection at once: [seq, batch, g * hidden].
  Tensor xw = ops::matmul(x, w, false, true);
  if (wb.defined()) xw = ops::add(xw, wb);
  if (rb.defined() && k != Cell::Gru) xw = ops::add(xw, rb);  // GRU adds Rb inside the reset gate
  const auto cell = k == Cell::Lstm ? ops::RecurrentCell::Lstm : k == Cell::Gru ? ops::RecurrentCell::Gru
                                                                              : ops::RecurrentCell::Rnn;
  const Tensor extra = k == Cell::Lstm ? c0 : k == Cell::Gru ? rb : Tensor();
  const Tensor all = ops::recurrent(cell, xw, r, h0, extra,
                                    {.reverse = reverse, .relu = relu, .linear_before_reset = c.i("linear_before_reset", 0) != 0});
  // [seq + 1 (+ 1), batch, hidden]: every step's h, the last h (and c)
  const int64_t batch = x.shape()[1];
  return {ops::slice(all, 0, 0, seq), ops::reshape(ops::slice(all, 0, seq, seq + 1), {batch, hs}),
          k == Cell::Lstm ? ops::reshape(ops::slice(all, 0, seq + 1, seq + 2), {batch, hs}) : Tensor()};
}

static Ts recurrent(const Ctx& c, Cell k) {
  const int64_t hs = c.i("hidden_size", 0);
  if (hs < 1) c.fail("hidden_size must be positive");
  const bool batch_first = c.i("layout", 0) != 0;
  Tensor x = c.x(0);
  if (x.ndim() != 3) c.fail("X must have 3 dimensions");
  if (batch_first) x = ops::contiguous(ops::transpose(x, 0, 1));
  const std::string dir = c.s("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") c.fail("direction '" + dir + "' is unknown");
  const int64_t dirs = dir == "bidirectional" ? 2 : 1, batch = x.shape()[1];
  const bool relu = check(c, k, dirs);
  if (c.x(1).ndim() != 3 || c.x(1).shape()[0] != dirs || c.x(1).shape()[1] != gates(k) * hs)
    c.fail("W has shape " + shape_str(c.x(1).shape()) + ", expected [" + std::to_string(dirs) + ", " +
           std::to_string(gates(k) * hs) + ", input_size]");
  // Initial states [dirs, batch, hidden] ([batch, dirs, hidden] with layout 1), else zeros.
  auto state = [&](size_t slot, int64_t d) {
    if (!c.has(slot)) return ops::expand(constant_like(ops::slice(ops::slice(x, 0, 0, 1), 2, 0, 1), 0.0), {1, batch, hs});
    return ops::slice(batch_first ? ops::transpose(c.x(slot), 0, 1) : c.x(slot), 0, d, d + 1);
  };
  Ts ys, hs_out, cs_out;
  for (int64_t d = 0; d < dirs; ++d) {
    const Tensor h0 = ops::reshape(ops::contiguous(state(5, d)), {batch, hs});
    const Tensor c0 = k == Cell::Lstm ? ops::reshape(ops::contiguous(state(6, d)), {batch, hs}) : Tensor();
    Ts r = run_direction(c, k, relu, x, d, dir == "reverse" || d == 1, h0, c0);
    ys.push_back(ops::unsqueeze(r[0], 1));  // [seq, 1, batch, hidden]
    hs_out.push_back(ops::unsqueeze(r[1], 0));
    if (k == Cell::Lstm) cs_out.push_back(ops::unsqueeze(r[2], 0));
  }
  auto join = [](const Ts& v, int64_t axis) { return v.size() == 1 ? v[0] : ops::concat(v, axis); };
  Tensor y = join(ys, 1), yh = join(hs_out, 0), yc = k == Cell::Lstm ? join(cs_out, 0) : Tensor();
  if (batch_first) {  // Y [batch, seq, dirs, hidden], Y_h / Y_c [batch, dirs, hidden]
    y = ops::contiguous(ops::permute(y, {2, 0, 1, 3}));
    yh = ops::contiguous(ops::transpose(yh, 0, 1));
    if (yc.defined()) yc = ops::contiguous(ops::transpose(yc, 0, 1));
  }
  Ts out{y, yh};
  if (k == Cell::Lstm) out.push_back(yc);
  out.resize(c.n.outputs.size());
  return out;
}

Ts lstm(const Ctx& c) { return recurrent(c, Cell::Lstm); }
Ts gru(const Ctx& c) { return recurrent(c, Cell::Gru); }
Ts rnn(const Ctx& c) { return recurrent(c, Cell::Rnn); }

}  // namespace hg::models::onnx_detail
