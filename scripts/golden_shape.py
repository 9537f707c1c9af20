#!/usr/bin/python3
"""Golden values for the shape family: broadcasting edge cases of add/sub/mul, permute,
transpose, expand with -1, slice, concat, split, reductions over several axes (sum, mean,
amax, argmax), batched matmul with broadcasting, and scaled dot-product attention.

Usage: /usr/bin/python3 scripts/golden_shape.py   (needs Debian's python3-torch)

Writes tests/golden/shape.json in gen_golden.py's case format (float64 math on float32-exact
inputs; one case per line). BOOL inputs (attention masks) are labelled "BOOL" with 0/1 data;
argmax cases have an I64 output and no gradients. attrs hold the op's arguments (dims,
keepdim, dim, start, end, step, sizes, index, trans_a, trans_b, causal, scale, shape).

torch 1.13 has no F.scaled_dot_product_attention, so attention is the explicit formula
softmax(q kᵀ * scale + mask) v, with -inf where a boolean mask is false or j > i (causal).
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden as g  # noqa: E402


def relabel(c, dtypes):
    for i, t in dtypes.items():
        c["inputs"][i]["dtype"] = t
    return c


def no_grad_case(name, op, fn, inputs, attrs):
    """A case whose output is I64 (argmax): no upstream, no grads."""
    out = fn(*inputs)
    return {"name": name, "op": op, "attrs": attrs, "inputs": [g.tensor_json(x) for x in inputs],
            "output": {"shape": list(out.shape), "dtype": "I64", "data": [int(v) for v in out.reshape(-1).tolist()]}}


def broadcast_cases():
    cases = []
    for op, fn in (("add", torch.add), ("sub", torch.sub), ("mul", torch.mul)):
        cases += [
            g.case(f"{op}_0x3_3", op, fn, [g.randn(0, 3), g.randn(3)]),
            g.case(f"{op}_scalar_2x3", op, fn, [g.randn(), g.randn(2, 3)]),
            g.case(f"{op}_4x1x2_3x1", op, fn, [g.randn(4, 1, 2), g.randn(3, 1)]),
        ]
    cases += [
        g.case("mul_2x3_scalar", "mul", torch.mul, [g.randn(2, 3), g.randn()]),
        g.case("add_scalar_scalar", "add", torch.add, [g.randn(), g.randn()]),
        g.case("sub_1x1x3_2x1", "sub", torch.sub, [g.randn(1, 1, 3), g.randn(2, 1)]),
        g.case("add_2x0x1_1x4", "add", torch.add, [g.randn(2, 0, 1), g.randn(1, 4)]),
    ]
    return cases


def movement_cases():
    perm = lambda dims: (lambda x: x.permute(*dims))  # noqa: E731
    sl = lambda d, s, e, st: (lambda x: x[(slice(None),) * (d % x.dim()) + (slice(s, e, st),)])  # noqa: E731
    return [
        g.case("permute_4d_0231", "permute", perm([0, 2, 3, 1]), [g.randn(2, 3, 2, 4)], {"dims": [0, 2, 3, 1]}),
        g.case("permute_4d_negative", "permute", perm([3, -4, 1, 2]), [g.randn(2, 3, 2, 4)], {"dims": [3, -4, 1, 2]}),
        g.case("permute_3d_reverse", "permute", perm([2, 1, 0]), [g.randn(3, 1, 4)], {"dims": [2, 1, 0]}),
        g.case("transpose_3d_1_2", "transpose", lambda x: x.transpose(1, 2), [g.randn(2, 3, 4)], {"dims": [1, 2]}),
        g.case("transpose_4d_0_neg1", "transpose", lambda x: x.transpose(0, -1), [g.randn(2, 3, 1, 4)],
               {"dims": [0, -1]}),
        g.case("expand_3x1_to_2xneg1x4", "expand", lambda x: x.expand(2, -1, 4), [g.randn(3, 1)],
               {"shape": [2, -1, 4]}),
        g.case("slice_5x4_dim0_1_5_2", "slice", sl(0, 1, 5, 2), [g.randn(5, 4)],
               {"dim": 0, "start": 1, "end": 5, "step": 2}),
        g.case("slice_3x6_neg", "slice", sl(-1, -4, -1, 1), [g.randn(3, 6)], {"dim": -1, "start": -4, "end": -1, "step": 1}),
        g.case("slice_2x7x3_clamped_step3", "slice", sl(1, 2, 100, 3), [g.randn(2, 7, 3)],
               {"dim": 1, "start": 2, "end": 100, "step": 3}),
        g.case("slice_3x4_empty", "slice", sl(1, 3, 1, 1), [g.randn(3, 4)], {"dim": 1, "start": 3, "end": 1, "step": 1}),
        g.case("concat_dim1_three", "concat", lambda *xs: torch.cat(xs, 1),
               [g.randn(2, 3, 4), g.randn(2, 1, 4), g.randn(2, 2, 4)], {"dim": 1}),
        g.case("concat_last_neg", "concat", lambda *xs: torch.cat(xs, -1), [g.randn(2, 3), g.randn(2, 2)], {"dim": -1}),
        g.case("concat_with_empty", "concat", lambda *xs: torch.cat(xs, 0), [g.randn(2, 3), g.randn(0, 3), g.randn(1, 3)],
               {"dim": 0}),
        g.case("split_sizes_dim1_piece1", "split", lambda x: torch.split(x, [1, 3, 1], 1)[1], [g.randn(2, 5, 3)],
               {"sizes": [1, 3, 1], "dim": 1, "index": 1}),
        g.case("split_size2_last_piece2", "split", lambda x: torch.split(x, 2, -1)[2], [g.randn(3, 5)],
               {"size": 2, "dim": -1, "index": 2}),
    ]


def reduction_cases():
    ties = g.f32(torch.tensor([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 0.5, 2.0], [0.0, -1.0, -2.0, 4.0]],
                              dtype=torch.float64))
    cases = []
    for op, fn in (("sum", torch.sum), ("mean", torch.mean), ("max", torch.amax)):
        cases += [
            g.case(f"{op}_2x3x4_dims_0_2", op, lambda x, fn=fn: fn(x, dim=[0, 2]), [g.randn(2, 3, 4)],
                   {"dims": [0, 2]}),
            g.case(f"{op}_2x3x4_neg_keepdim", op, lambda x, fn=fn: fn(x, dim=[-1, -3], keepdim=True),
                   [g.randn(2, 3, 4)], {"dims": [-1, -3], "keepdim": True}),
            g.case(f"{op}_2x3x2x3_dims_1_3", op, lambda x, fn=fn: fn(x, dim=[1, 3]), [g.randn(2, 3, 2, 3)],
                   {"dims": [1, 3]}),
            g.case(f"{op}_3x4_dim1_keepdim", op, lambda x, fn=fn: fn(x, dim=1, keepdim=True), [g.randn(3, 4)],
                   {"dims": [1], "keepdim": True}),
        ]
    cases += [
        g.case("sum_all_2x3x4", "sum", torch.sum, [g.randn(2, 3, 4)], {}),
        g.case("mean_all_keepdim_2x3", "mean", lambda x: torch.mean(x, dim=[0, 1], keepdim=True), [g.randn(2, 3)],
               {"dims": [], "keepdim": True}),
        g.case("max_all_3x4", "max", torch.amax, [g.randn(3, 4)], {}),
        g.case("sum_0x3_dim0", "sum", lambda x: torch.sum(x, 0), [g.randn(0, 3)], {"dims": [0]}),
        g.case("sum_0x3_all", "sum", torch.sum, [g.randn(0, 3)], {}),
        g.case("max_0x3_dim1", "max", lambda x: torch.amax(x, 1), [g.randn(0, 3)], {"dims": [1]}),
        g.case("mean_0x3_dim1", "mean", lambda x: torch.mean(x, 1), [g.randn(0, 3)], {"dims": [1]}),
        g.case("max_ties_dim1", "max", lambda x: torch.amax(x, 1), [ties], {"dims": [1]}),
        g.case("max_ties_all", "max", torch.amax, [ties], {}),
        g.case("sum_scalar", "sum", torch.sum, [g.randn()], {}),
        no_grad_case("argmax_ties_dim1", "argmax", lambda x: torch.argmax(x, 1), [ties], {"dim": 1}),
        no_grad_case("argmax_dim0_keepdim", "argmax", lambda x: torch.argmax(x, 0, keepdim=True), [g.randn(3, 4)],
                     {"dim": 0, "keepdim": True}),
        no_grad_case("argmax_neg_2x3x4", "argmax", lambda x: torch.argmax(x, -2), [g.randn(2, 3, 4)], {"dim": -2}),
        no_grad_case("argmax_all_3x4", "argmax", torch.argmax, [g.randn(3, 4)], {}),
    ]
    return cases


def bmm_cases():
    tr = lambda x: x.transpose(-1, -2)  # noqa: E731
    return [
        g.case("bmm_2x3x4_2x4x5", "bmm", torch.matmul, [g.randn(2, 3, 4), g.randn(2, 4, 5)]),
        g.case("bmm_2x3x4_4x5", "bmm", torch.matmul, [g.randn(2, 3, 4), g.randn(4, 5)]),
        g.case("bmm_3x4_2x4x5", "bmm", torch.matmul, [g.randn(3, 4), g.randn(2, 4, 5)]),
        g.case("bmm_2x1x3x4_1x3x4x2", "bmm", torch.matmul, [g.randn(2, 1, 3, 4), g.randn(1, 3, 4, 2)]),
        g.case("bmm_trans_b", "bmm", lambda a, b: a @ tr(b), [g.randn(2, 3, 4), g.randn(2, 5, 4)], {"trans_b": True}),
        g.case("bmm_trans_a", "bmm", lambda a, b: tr(a) @ b, [g.randn(2, 4, 3), g.randn(2, 4, 5)], {"trans_a": True}),
        g.case("bmm_trans_both_bcast", "bmm", lambda a, b: tr(a) @ tr(b), [g.randn(3, 1, 4, 2), g.randn(2, 3, 4)],
               {"trans_a": True, "trans_b": True}),
        g.case("bmm_trans_b_2d", "bmm", lambda a, b: a @ tr(b), [g.randn(2, 3, 4), g.randn(5, 4)], {"trans_b": True}),
        g.case("matmul_rank3_routes_to_bmm", "matmul", torch.matmul, [g.randn(2, 2, 3), g.randn(2, 3, 2)]),
    ]


def sdpa(q, k, v, mask=None, causal=False, scale=None):
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def attention_cases():
    mask = torch.tensor([[1, 0, 1, 1, 0], [0, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    return [
        g.case("sdpa_2x2x3x4_kv5", "sdpa", sdpa, [g.randn(2, 2, 3, 4), g.randn(2, 2, 5, 4), g.randn(2, 2, 5, 3)]),
        g.case("sdpa_causal_1x2x4x4", "sdpa", lambda q, k, v: sdpa(q, k, v, causal=True),
               [g.randn(1, 2, 4, 4), g.randn(1, 2, 4, 4), g.randn(1, 2, 4, 4)], {"causal": True}),
        g.case("sdpa_causal_L3_S5", "sdpa", lambda q, k, v: sdpa(q, k, v, causal=True),
               [g.randn(2, 3, 4), g.randn(2, 5, 4), g.randn(2, 5, 2)], {"causal": True}),
        relabel(g.case("sdpa_bool_mask", "sdpa", lambda q, k, v, m: sdpa(q, k, v, m),
                       [g.randn(1, 2, 3, 4), g.randn(1, 2, 5, 4), g.randn(1, 2, 5, 4), mask]), {3: "BOOL"}),
        g.case("sdpa_float_mask_scale", "sdpa", lambda q, k, v, m: sdpa(q, k, v, m, scale=0.3),
               [g.randn(2, 1, 3, 4), g.randn(2, 1, 5, 4), g.randn(2, 1, 5, 4), g.randn(1, 1, 3, 5)], {"scale": 0.3}),
        g.case("sdpa_kv_broadcast", "sdpa", sdpa, [g.randn(2, 2, 3, 4), g.randn(1, 2, 3, 4), g.randn(1, 2, 3, 2)]),
    ]


def main():
    torch.manual_seed(0)
    cases = broadcast_cases() + movement_cases() + reduction_cases() + bmm_cases() + attention_cases()
    g.dump("shape.json", "[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n")


if __name__ == "__main__":
    main()
