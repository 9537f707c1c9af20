// A recurrent layer's sequence loop as one op: LSTM, GRU or simple RNN cells over every time
// step in one kernel (a GEMM with the recurrent weights and the gate arithmetic per step), so a
// captured graph holds one node per layer and direction and its replay runs the loop inside.
// F32, inference only (no backward). The input projection x W^T + biases is computed beforehand,
// for every step at once, by one matmul (ONNX's gate layouts: LSTM i, o, f, c; GRU z, r, h).
//
//   using namespace hg::ops;
//   Tensor xw = add(matmul(x, w, false, true), bias);              // [T, B, 4H]: W and both biases
//   Tensor all = recurrent(RecurrentCell::Lstm, xw, r, h0, c0);     // r [4H, H], h0/c0 [B, H]
//   Tensor y = slice(all, 0, 0, T);                                 // every step's h [T, B, H]
//   Tensor h_last = slice(all, 0, T, T + 1), c_last = slice(all, 0, T + 1, T + 2);
#pragma once
#include "engine/tensor.h"

namespace hg::ops {

enum class RecurrentCell : int64_t { Lstm = 0, Gru = 1, Rnn = 2 };

struct RecurrentOptions {
  bool reverse = false;              // steps from T - 1 down to 0 (outputs stay in time order)
  bool relu = false;                 // Rnn: relu instead of tanh
  bool linear_before_reset = false;  // Gru: r * (h R_h^T + Rb_h) instead of (r * h) R_h^T + Rb_h
};

// xw [T, B, G*H] (G = 4, 3, 1 gates), r [G*H, H], h0 [B, H]; `extra` is c0 [B, H] for an LSTM,
// the recurrent bias Rb [G*H] for a GRU (undefined: none; an LSTM's and RNN's Rb go into xw),
// undefined for an RNN. Returns [T + 1, B, H] (+1 more row for an LSTM): the hidden state of
// every step in time order, then the final hidden state (and the final cell state).
Tensor recurrent(RecurrentCell cell, const Tensor& xw, const Tensor& r, const Tensor& h0, const Tensor& extra = {},
                 const RecurrentOptions& opt = {});

}  // namespace hg::ops
