#!/usr/bin/python3
"""Golden gradients from PyTorch autograd: fused attention (masked, causal) and one training
step (cross-entropy loss and every parameter gradient) of the zoo MLP, LeNet-5 and a small
BERT classifier.

Usage: /usr/bin/python3 scripts/golden_autograd.py   (needs Debian's python3-torch)

Writes into tests/golden/:
  autograd_sdpa.json   gen_golden.py's case format: q, k, v (F32), the mask (BOOL 0/1 or F32),
                       output, upstream, grads of q, k, v. attrs {"mask": "none" | "bool" |
                       "add", "causal", "scale"}. torch 1.13 has no F.scaled_dot_product_attention:
                       the formula softmax(q kᵀ * scale + mask) v, -inf where a BOOL mask is
                       false or j > i (causal).
  autograd_<model>.json {"model", "config", "input", "target", "loss",
                       "grads": {state_dict key: {"shape", "sum", "sumsq", "absmax",
                       "stride", "sample"}}} where sample = grad.flatten()[::stride] (stride 1
                       up to 512 elements, else ceil(n / 256)), then "loss_bf16_mixed" and
                       "grads_bf16_mixed": the step under
                       torch.autocast("cpu", bfloat16) with float32 master weights.

Weights and inputs are not stored: both sides compute them with the formula in `hashed`
(glibc's sin in float64, rounded to float32), tensor p of the state_dict in sorted key order.
Math is float64 on those float32 values; dropout is off (p = 0).
"""
import json
import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden as g  # noqa: E402
from torch_zoo import BertClassifier, LeNet5  # noqa: E402

BERT_CONFIG = {"vocab": 50, "d_model": 32, "nhead": 4, "layers": 2, "ff": 64, "max_len": 16, "classes": 3}


def hashed(shape, p, scale, offset=0.0):
    """offset + scale * (2u - 1), u = frac(sin(12.9898 i + 78.233 p) * 43758.5453), as float32."""
    n = math.prod(shape)
    vals = []
    for i in range(n):
        x = math.sin(12.9898 * i + 78.233 * p) * 43758.5453
        vals.append(offset + scale * (2.0 * (x - math.floor(x)) - 1.0))
    return torch.tensor(vals, dtype=torch.float64).reshape(shape).to(torch.float32).to(torch.float64)


def weight_for(key, shape, p):
    """Layer-norm weights near 1, other 1-D tensors (biases) small, matrices 1/sqrt(fan_in)."""
    if len(shape) == 1:
        return hashed(shape, p, 0.1, 1.0 if "norm" in key and key.endswith(".weight") else 0.0)
    return hashed(shape, p, 1.0 / math.sqrt(math.prod(shape[1:])))


def load_hashed(model):
    state = model.state_dict()
    new = {k: weight_for(k, list(state[k].shape), p) for p, k in enumerate(sorted(state))}
    model.load_state_dict(new)


def grad_json(t):
    flat = t.detach().reshape(-1)
    n = flat.numel()
    stride = 1 if n <= 512 else -(-n // 256)
    return {"shape": list(t.shape), "sum": float(flat.sum()), "sumsq": float((flat * flat).sum()),
            "absmax": float(flat.abs().max()), "stride": stride, "sample": g.flat(flat[::stride])}


def no_dropout(model):
    """Dropout off, training mode kept."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        if isinstance(m, nn.MultiheadAttention):
            m.dropout = 0.0
    return model.train()


def train_step(name, model, config, x, target):
    model = no_dropout(model).double()
    load_hashed(model)
    loss = nn.functional.cross_entropy(model(x), target)
    loss.backward()
    grads = {k: grad_json(p.grad) for k, p in model.named_parameters()}
    x_json = g.tensor_json(x, "I64" if not x.is_floating_point() else "F32")
    return {"model": name, "config": config, "input": x_json, "target": g.tensor_json(target, "I64"),
            "loss": float(loss), "grads": grads}


def bf16_mixed_step(golden, model, x, target):
    """The same step under torch.autocast("cpu", bfloat16) on float32 master weights."""
    model = model.float()
    load_hashed(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x.float() if x.is_floating_point() else x), target)
    loss.backward()
    golden["loss_bf16_mixed"] = float(loss)
    golden["grads_bf16_mixed"] = {k: grad_json(p.grad) for k, p in model.named_parameters()}
    return golden


def labels(n, classes):
    return torch.tensor([(7 * i + 1) % classes for i in range(n)], dtype=torch.int64)


def zoo_goldens():
    mlp = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    x, y = hashed([8, 64], 1000, 1.0), labels(8, 10)
    golden = train_step("mlp", mlp, {"sizes": [64, 32, 10]}, x, y)
    yield "mlp", bf16_mixed_step(golden, nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)), x, y)
    x, y = hashed([4, 1, 32, 32], 1000, 1.0), labels(4, 10)
    yield "lenet5", bf16_mixed_step(train_step("lenet5", LeNet5(), {"classes": 10}, x, y), LeNet5(), x, y)
    c = BERT_CONFIG
    bert = BertClassifier(c["vocab"], c["d_model"], c["nhead"], c["layers"], c["ff"], c["max_len"], c["classes"])
    ids = torch.tensor([[(7 * i + 3 * j + 1) % c["vocab"] for j in range(10)] for i in range(3)], dtype=torch.int64)
    golden = train_step("bert_classifier", bert, c, ids, labels(3, c["classes"]))
    bert = BertClassifier(c["vocab"], c["d_model"], c["nhead"], c["layers"], c["ff"], c["max_len"], c["classes"])
    yield "bert", bf16_mixed_step(golden, no_dropout(bert), ids, labels(3, c["classes"]))


def attention(q, k, v, mask, causal, scale):
    s = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask
    if causal:
        lq, ls = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(lq, ls, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, -1) @ v


def sdpa_cases():
    torch.manual_seed(7)
    q, k, v = g.randn(2, 2, 4, 8), g.randn(2, 2, 6, 8), g.randn(2, 2, 6, 5)
    bool_mask = torch.rand(2, 1, 4, 6) > 0.3
    bool_mask[..., 0] = True  # no fully masked row
    add_mask = g.randn(1, 2, 4, 6)
    cases = []
    for mask, kind in ((None, "none"), (bool_mask, "bool"), (add_mask, "add")):
        for causal in (False, True):
            scale = 0.35 if kind == "add" else 1 / math.sqrt(8)
            inputs = [q, k, v] + ([] if mask is None else [mask])
            name = f"sdpa_{kind}{'_causal' if causal else ''}"
            fn = (lambda a, b, c, m=None, causal=causal, scale=scale: attention(a, b, c, m, causal, scale))
            case = g.case(name, "sdpa", fn, inputs, {"mask": kind, "causal": causal, "scale": scale})
            if kind == "bool":
                case["inputs"][3] = {"shape": list(mask.shape), "dtype": "BOOL",
                                     "data": [int(b) for b in mask.reshape(-1).tolist()]}
            if kind == "add":
                case["grads"] = case["grads"][:3]  # no gradient for the mask
            cases.append(case)
    return cases


def main():
    os.makedirs(g.OUT_DIR, exist_ok=True)
    g.dump("autograd_sdpa.json", "[\n" + ",\n".join(json.dumps(c) for c in sdpa_cases()) + "\n]\n")
    for name, golden in zoo_goldens():
        lines = []
        for key, value in golden.items():  # one gradient per line
            if key.startswith("grads"):
                value = "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()) + "\n }"
            else:
                value = json.dumps(value)
            lines.append(f" {json.dumps(key)}: {value}")
        g.dump(f"autograd_{name}.json", "{\n" + ",\n".join(lines) + "\n}\n")


if __name__ == "__main__":
    main()
