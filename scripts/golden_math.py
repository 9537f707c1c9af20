#!/usr/bin/python3
"""Golden values for the math family (engine/ops_math.h) and ops::div: sqrt, erf, exp, pow
with a constant exponent, and broadcasting division.

Usage: /usr/bin/python3 scripts/golden_math.py   (needs Debian's python3-torch)

Writes tests/golden/math.json in gen_golden.py's case format (float64 math on float32-exact
inputs, one case per line). attrs: {"exponent"} for pow.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden as g  # noqa: E402


def cases():
    torch.manual_seed(0)
    positive = g.f32(torch.rand(3, 5, dtype=torch.float64) * 4 + 0.05)
    wide = g.f32(g.randn(3, 5) * 2)
    return [
        g.case("sqrt_3x5", "sqrt", torch.sqrt, [positive]),
        g.case("erf_3x5", "erf", torch.erf, [wide]),
        g.case("exp_3x5", "exp", torch.exp, [wide]),
        g.case("pow_2_3x5", "pow", lambda x: torch.pow(x, 2.0), [wide], {"exponent": 2.0}),
        g.case("pow_1.5_3x5", "pow", lambda x: torch.pow(x, 1.5), [positive], {"exponent": 1.5}),
        g.case("pow_-0.5_3x5", "pow", lambda x: torch.pow(x, -0.5), [positive], {"exponent": -0.5}),
        g.case("div_3x5", "div", torch.div, [wide, positive]),
        g.case("div_broadcast_2x3x1_by_4", "div", torch.div, [g.randn(2, 3, 1), g.f32(torch.rand(4, dtype=torch.float64) + 0.5)]),
    ]


def main():
    path = os.path.join(g.OUT_DIR, "math.json")
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(c) for c in cases()) + "\n]\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
