#!/usr/bin/python3
"""Golden values for the act family: activations, embedding, gather, where, masked_fill,
cross_entropy and mse_loss.

Usage: /usr/bin/python3 scripts/golden_act.py   (needs Debian's python3-torch)

Writes tests/golden/act.json in gen_golden.py's case format (float64 math on float32-exact
inputs; one case per line). Integer inputs are "I64" (or "I32"), masks are "BOOL" with 0/1
data; neither gets a gradient. attrs hold the op's arguments: approximate, dim, value,
ignore_index, label_smoothing, reduction.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden as g  # noqa: E402

F = torch.nn.functional


def relabel(c, dtypes):
    """Sets the dtype label of inputs whose index is in `dtypes` (BOOL masks, I32 indices)."""
    for i, t in dtypes.items():
        c["inputs"][i]["dtype"] = t
    return c


def wide_3x5():
    """A [3, 5] input with ordinary values and large magnitudes (saturation, overflow of exp)."""
    x = g.randn(3, 5) * 2
    x[0, 0], x[0, 1], x[1, 2], x[2, 3], x[2, 4] = 20.0, -20.0, 100.0, -100.0, -9.0
    return g.f32(x)


def activation_cases():
    cases = []
    for name, fn, attrs in (
        ("gelu_erf", lambda x: F.gelu(x), {"approximate": "none"}),
        ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), {"approximate": "tanh"}),
        ("silu", F.silu, {}),
        ("tanh", torch.tanh, {}),
        ("sigmoid", torch.sigmoid, {}),
    ):
        op = "gelu" if name.startswith("gelu") else name
        cases.append(g.case(f"{name}_3x5", op, fn, [wide_3x5()], attrs))
    return cases


def index_cases():
    i64 = lambda v: torch.tensor(v, dtype=torch.int64)  # noqa: E731
    return [
        g.case("embedding_2x3_repeated", "embedding", F.embedding,
               [i64([[1, 3, 1], [0, 3, 3]]), g.randn(5, 4)]),
        relabel(g.case("embedding_i32_4", "embedding", F.embedding, [i64([2, 2, 0, 4]), g.randn(5, 3)]), {0: "I32"}),
        g.case("gather_dim0_3x4", "gather", lambda x, i: torch.gather(x, 0, i),
               [g.randn(3, 4), i64([[2, 0, 1, 2], [2, 2, 0, 1]])], {"dim": 0}),
        g.case("gather_dim1_3x4", "gather", lambda x, i: torch.gather(x, 1, i),
               [g.randn(3, 4), i64([[3, 3], [0, 1], [2, 0]])], {"dim": 1}),
        g.case("gather_dim-1_2x3", "gather", lambda x, i: torch.gather(x, -1, i),
               [g.randn(2, 3), i64([[1, 1, 2, 0], [0, 2, 2, 2]])[:, :3]], {"dim": -1}),
    ]


def select_cases():
    b = lambda v: torch.tensor(v, dtype=torch.bool)  # noqa: E731
    where = lambda c, x, y: torch.where(c, x, y)  # noqa: E731
    return [
        relabel(g.case("where_c2x1_a1x3_b2x3", "where", where, [b([[True], [False]]), g.randn(1, 3), g.randn(2, 3)]),
                {0: "BOOL"}),
        relabel(g.case("where_c1_a2x3_b3", "where", where, [b([True]), g.randn(2, 3), g.randn(3)]), {0: "BOOL"}),
        relabel(g.case("where_c2x3_a2x1_b1x3", "where", where,
                       [b([[True, False, True], [False, False, True]]), g.randn(2, 1), g.randn(1, 3)]), {0: "BOOL"}),
        relabel(g.case("masked_fill_2x3_m1", "masked_fill", lambda x, m: x.masked_fill(m, -1.5),
                       [g.randn(2, 3), b([True])], {"value": -1.5}), {1: "BOOL"}),
        relabel(g.case("masked_fill_2x1_m1x3", "masked_fill", lambda x, m: torch.masked_fill(x, m, 2.0),
                       [g.randn(2, 1), b([[True, False, False]])], {"value": 2.0}), {1: "BOOL"}),
        relabel(g.case("masked_fill_2x3_m2x1", "masked_fill", lambda x, m: x.masked_fill(m, -1e9),
                       [g.randn(2, 3), b([[False], [True]])], {"value": -1e9}), {1: "BOOL"}),
    ]


def loss_cases():
    t = torch.tensor([1, -100, 3, 0, 2], dtype=torch.int64)
    cases = []
    for red in ("mean", "sum", "none"):
        for ls in (0.0, 0.1):
            cases.append(g.case(
                f"cross_entropy_{red}_ls{ls}_ignore", "cross_entropy",
                lambda x, y, red=red, ls=ls: F.cross_entropy(x, y, ignore_index=-100, label_smoothing=ls, reduction=red),
                [g.randn(5, 4), t], {"ignore_index": -100, "label_smoothing": ls, "reduction": red}))
    cases.append(g.case(
        "cross_entropy_mean_ignore1", "cross_entropy",
        lambda x, y: F.cross_entropy(x, y, ignore_index=1, label_smoothing=0.2),
        [g.randn(4, 3), torch.tensor([1, 0, 1, 2], dtype=torch.int64)],
        {"ignore_index": 1, "label_smoothing": 0.2, "reduction": "mean"}))
    for red in ("mean", "sum", "none"):
        cases.append(g.case(f"mse_loss_{red}_3x4", "mse_loss", lambda a, b, red=red: F.mse_loss(a, b, reduction=red),
                            [g.randn(3, 4), g.randn(3, 4)], {"reduction": red}))
    return cases


def main():
    torch.manual_seed(0)
    cases = activation_cases() + index_cases() + select_cases() + loss_cases()
    g.dump("act.json", "[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n")


if __name__ == "__main__":
    main()
