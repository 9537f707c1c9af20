#!/usr/bin/python3
"""Test data for tests/zoo_test.cpp, made by PyTorch (scripts/torch_zoo.py) at test time.

Usage: /usr/bin/python3 scripts/testdata_zoo.py OUT_DIR

Writes into OUT_DIR, for MODEL in lenet5, resnet18, bert_classifier, layers:
  MODEL.safetensors     the eval-mode model's state_dict (seeded; biases, norm weights and
                        BatchNorm running statistics perturbed so that loading them matters)
  MODEL_io.safetensors  "input" and "output" of the eval-mode forward (resnet18 also
                        "input224"/"output224"; layers: a Sequential of Conv2d, BatchNorm2d,
                        SiLU, AvgPool2d, GELU, Flatten, Linear, Tanh, Linear, Sigmoid)
  MODEL_grad.safetensors  "weight" R (random, the shape of the output) and "grad.NAME", the
                        gradient of sum(R * output) for every parameter NAME (lenet5 and
                        bert_classifier in eval mode, layers in training mode: BatchNorm with
                        batch statistics; also its "output")
  keys.json             {MODEL: [state_dict keys in PyTorch's order]}
  attention.safetensors "mha.*" an nn.MultiheadAttention(16, 4, batch_first) with "mha_query"
                        [2, 3, 16], "mha_kv" [2, 5, 16], "mha_cross" = mha(query, kv, kv) and
                        "mha_causal" = mha(kv, kv, kv) with a causal mask; "tel.*" an
                        nn.TransformerEncoderLayer(16, 2, 32, relu, norm_first=True) with "tel_in"
                        [2, 5, 16] and "tel_out"
  batchnorm.safetensors BatchNorm2d(3) in training mode: "state.*" before, "x1", "x2" [4, 3, 5, 5]
                        two steps' inputs, "y1", "y2" their outputs, "after.*" the state after
  stamp                 hash of this script and torch_zoo.py; outputs are not remade while it matches
"""
import json
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_zoo import BertClassifier, LeNet5, resnet18, write_safetensors  # noqa: E402
import testdata_util  # noqa: E402


def perturb(model):
    """Random biases, norm weights and running statistics (defaults would hide loading bugs)."""
    with torch.no_grad():
        for name, t in model.state_dict().items():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "bias":
                t.copy_(0.1 * torch.randn_like(t))
            elif t.dim() == 1 and leaf == "weight":  # BatchNorm / LayerNorm scale
                t.copy_(1 + 0.1 * torch.randn_like(t))
            elif leaf == "running_mean":
                t.copy_(0.1 * torch.randn_like(t))
            elif leaf == "running_var":
                t.copy_(1 + 0.2 * torch.rand_like(t))
            elif leaf == "num_batches_tracked":
                t.fill_(3)
    return model.eval()


def save_model(out, name, model, io, keys):
    write_safetensors(os.path.join(out, name + ".safetensors"), model.state_dict())
    write_safetensors(os.path.join(out, name + "_io.safetensors"), io)
    keys[name] = list(model.state_dict().keys())


def save_grads(out, name, model, x):
    """Gradients of sum(R * model(x)) for a fixed random R."""
    model.zero_grad()
    y = model(x)
    r = torch.randn_like(y)
    (y * r).sum().backward()
    grads = {"grad." + k: p.grad for k, p in model.named_parameters()}
    write_safetensors(os.path.join(out, name + "_grad.safetensors"), {"weight": r, "output": y.detach(), **grads})


def prefixed(prefix, module):
    return {prefix + k: v for k, v in module.state_dict().items()}


def make(out):
    keys, grads = {}, {}
    with torch.no_grad():
        torch.manual_seed(0)
        net = perturb(LeNet5())
        x = torch.randn(3, 1, 32, 32)
        save_model(out, "lenet5", net, {"input": x, "output": net(x)}, keys)
        grads["lenet5"] = (net, x)

        torch.manual_seed(1)
        net = perturb(resnet18())
        x, x224 = torch.randn(1, 3, 64, 64), torch.randn(1, 3, 224, 224)
        save_model(out, "resnet18", net, {"input": x, "output": net(x), "input224": x224, "output224": net(x224)}, keys)

        torch.manual_seed(2)
        net = perturb(BertClassifier())
        ids = torch.randint(0, 1000, (2, 16))
        save_model(out, "bert_classifier", net, {"input": ids, "output": net(ids)}, keys)
        grads["bert_classifier"] = (net, ids)

        torch.manual_seed(3)
        net = perturb(nn.Sequential(nn.Conv2d(2, 4, 3, stride=2, padding=1), nn.BatchNorm2d(4), nn.SiLU(),
                                    nn.AvgPool2d(3, 2, 1), nn.GELU(), nn.Flatten(), nn.Linear(16, 5), nn.Tanh(),
                                    nn.Linear(5, 3), nn.Sigmoid()))
        x = torch.randn(2, 2, 8, 8)
        save_model(out, "layers", net, {"input": x, "output": net(x)}, keys)
        grads["layers"] = (net.train(), x)

        torch.manual_seed(4)
        mha = perturb(nn.MultiheadAttention(16, 4, batch_first=True))
        tel = perturb(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, activation="relu", batch_first=True,
                                                 norm_first=True))
        q, kv, tel_in = torch.randn(2, 3, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)
        causal = torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)
        att = {**prefixed("mha.", mha), **prefixed("tel.", tel), "mha_query": q, "mha_kv": kv,
               "mha_cross": mha(q, kv, kv, need_weights=False)[0],
               "mha_causal": mha(kv, kv, kv, attn_mask=causal, need_weights=False)[0],
               "tel_in": tel_in, "tel_out": tel(tel_in)}
        write_safetensors(os.path.join(out, "attention.safetensors"), att)
        keys["mha"] = list(mha.state_dict().keys())
        keys["tel"] = list(tel.state_dict().keys())

    torch.manual_seed(6)
    for name, (net, x) in grads.items():
        save_grads(out, name, net, x)

    torch.manual_seed(5)
    bn = perturb(nn.BatchNorm2d(3)).train()
    bn.momentum = 0.2
    state = prefixed("state.", bn)
    state = {k: v.clone() for k, v in state.items()}
    x1, x2 = torch.randn(4, 3, 5, 5), 2 + 3 * torch.randn(4, 3, 5, 5)
    with torch.no_grad():
        y1, y2 = bn(x1), bn(x2)
    write_safetensors(os.path.join(out, "batchnorm.safetensors"),
                      {**state, "x1": x1, "x2": x2, "y1": y1, "y2": y2, **prefixed("after.", bn)})

    with open(os.path.join(out, "keys.json.tmp"), "w") as f:
        json.dump(keys, f, indent=1)
    os.replace(os.path.join(out, "keys.json.tmp"), os.path.join(out, "keys.json"))


if __name__ == "__main__":
    testdata_util.run(make, ["testdata_zoo.py", "torch_zoo.py"], threads=2)
