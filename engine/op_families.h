// Internal: each op family registers its schemas; register_builtin_ops() (op_schemas.cpp)
// calls them all once, the first time an op is looked up.
//
//   void register_core_ops();   // defined next to the family's schemas
#pragma once

namespace hg {

void register_builtin_ops();
void register_core_ops();  // op_schemas.cpp: the MLP path
void register_nn_ops();    // nn_ops.cpp: conv2d, pooling, batch_norm, layer_norm
void register_layout_ops();  // layout_ops.cpp: to_blocked, from_blocked (engine/ops_layout.h)
void register_act_ops();   // act_ops.cpp, loss_ops.cpp: activations, dropout, indexing, where, losses
void register_math_ops();   // math_ops.cpp: sqrt, erf, exp, pow
void register_shape_ops();  // shape_ops.cpp, reduce_ops.cpp, attention_ops.cpp: views, reductions, bmm, attention
void register_fused_ops();  // fused_elementwise.cpp, sdpa_kernel.cpp: ops of the fusion passes (engine/fused_ops.h)
void register_recurrent_ops();
void register_int8_ops();  // int8_ops.cpp: matmul_int8 (dynamic quantization)  // recurrent_kernel.cpp: LSTM/GRU/RNN sequence loops (engine/ops_recurrent.h)

}  // namespace hg
