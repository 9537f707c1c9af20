#!/usr/bin/python3
"""Generates the PyTorch golden values the op conformance tests compare against.

Usage: /usr/bin/python3 scripts/gen_golden.py   (needs Debian's python3-torch)

Writes tests/golden/ops.json and tests/golden/mlp.json. Inputs are drawn with
torch.manual_seed, rounded to float32 and then computed in float64 from those exact
float32 values, so each golden is the correctly rounded float32 of the true result.
Numbers are printed with the shortest decimal that reads back as the same float32.

ops.json: a list of cases
  {"name", "op", "attrs": {...},
   "inputs": [{"shape": [...], "dtype": "F32" | "I64", "data": [flat values]}, ...],
   "output": {"shape", "data"},
   "upstream": {"shape", "data"},        # dL/d(output) for loss = (output * upstream).sum()
   "grads": [[flat grad], ...]}           # one per F32 input, in input order
mlp.json: {"weights": {state_dict key: {"shape", "data"}}, "input": {...}, "output": {...}}
for nn.Sequential(Linear(64, 32), ReLU(), Linear(32, 10)) initialised by torch.manual_seed(1).
"""
import json
import os

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "golden")


def f32(t):
    """Rounds to float32 and back to float64, so later float64 math sees exact float32 values."""
    return t.detach().to(torch.float32).to(torch.float64)


def flat(t):
    """Flat list of shortest decimals that read back as the same float32."""
    return [float(repr(v)) for v in t.detach().to(torch.float32).reshape(-1).numpy()]


def tensor_json(t, dtype="F32"):
    data = [int(v) for v in t.reshape(-1).tolist()] if dtype == "I64" else flat(t)
    return {"shape": list(t.shape), "dtype": dtype, "data": data}


def randn(*shape):
    return f32(torch.randn(tuple(shape), dtype=torch.float64))


def case(name, op, fn, inputs, attrs=None):
    """inputs: float64 tensors (differentiated) or int64 tensors (not differentiated)."""
    leaves = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*leaves)
    upstream = randn(*out.shape)
    (out * upstream).sum().backward()
    return {
        "name": name,
        "op": op,
        "attrs": attrs or {},
        "inputs": [tensor_json(x, "F32" if x.is_floating_point() else "I64") for x in leaves],
        "output": {"shape": list(out.shape), "data": flat(out)},
        "upstream": {"shape": list(upstream.shape), "data": flat(upstream)},
        "grads": [flat(x.grad) for x in leaves if x.is_floating_point()],
    }


def op_cases():
    F = torch.nn.functional
    torch.manual_seed(0)
    cases = [
        case("matmul_3x4_4x5", "matmul", torch.matmul, [randn(3, 4), randn(4, 5)]),
        case("linear_2x4_3x4", "linear", F.linear, [randn(2, 4), randn(3, 4), randn(3)]),
        case("relu_3x4", "relu", F.relu, [randn(3, 4)]),
        case("softmax_2x5", "softmax", lambda x: F.softmax(x, dim=-1), [randn(2, 5)], {"dim": -1}),
        case("log_softmax_2x5", "log_softmax", lambda x: F.log_softmax(x, dim=-1), [randn(2, 5)],
             {"dim": -1}),
        case("cross_entropy_4x5", "cross_entropy",
             lambda logits, target: F.cross_entropy(logits, target, reduction="mean"),
             [randn(4, 5), torch.tensor([1, 0, 4, 2], dtype=torch.int64)], {"reduction": "mean"}),
    ]
    for op, fn in (("add", torch.add), ("sub", torch.sub), ("mul", torch.mul)):
        cases.append(case(f"{op}_2x3_3", op, fn, [randn(2, 3), randn(3)]))
        cases.append(case(f"{op}_2x1_1x3", op, fn, [randn(2, 1), randn(1, 3)]))
    cases += [
        case("sum_all_3x4", "sum", torch.sum, [randn(3, 4)]),
        case("sum_dim0_3x4", "sum", lambda x: torch.sum(x, dim=0), [randn(3, 4)], {"dim": 0}),
        case("mean_all_3x4", "mean", torch.mean, [randn(3, 4)]),
        case("mean_dim0_3x4", "mean", lambda x: torch.mean(x, dim=0), [randn(3, 4)], {"dim": 0}),
    ]
    return cases


def mlp_golden():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    x = torch.randn(3, 64)  # float32
    with torch.no_grad():
        out = model.double()(x.double())  # float32 weights and input, float64 math
    return {
        "model": "Sequential(Linear(64, 32), ReLU(), Linear(32, 10))",
        "weights": {k: {"shape": list(v.shape), "data": flat(v)} for k, v in model.state_dict().items()},
        "input": {"shape": list(x.shape), "data": flat(x)},
        "output": {"shape": list(out.shape), "data": flat(out)},
    }


def dump(name, text):
    path = os.path.join(OUT_DIR, name)
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    # One case (or one weight) per line keeps diffs readable.
    dump("ops.json", "[\n" + ",\n".join(json.dumps(c) for c in op_cases()) + "\n]\n")
    mlp = mlp_golden()
    lines = [f' "model": {json.dumps(mlp["model"])},', ' "weights": {']
    lines.append(",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in mlp["weights"].items()))
    lines += [" },", f' "input": {json.dumps(mlp["input"])},', f' "output": {json.dumps(mlp["output"])}']
    dump("mlp.json", "{\n" + "\n".join(lines) + "\n}\n")


if __name__ == "__main__":
    main()
