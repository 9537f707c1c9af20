#!/usr/bin/python3
"""PyTorch's own reduced precision on the brought models, the yardstick for hgraph's agreement
figures, against FP32 on 64 seeded standard-normal images:
  - bf16: torch.autocast("cpu", bfloat16);
  - int8: the dynamic quantization hgraph's "int8" defines (ONNX Runtime's quantize_dynamic),
    simulated in FP32 with PyTorch's fake quantization: every Linear and every Conv2d with
    groups 1 quantizes its input per tensor (u8, asymmetric over [min(x, 0), max(x, 0)]) and its
    weight per output channel (s8, symmetric) before running.
    /usr/bin/python3 bench/torch_precision.py [MODEL...]   (default resnet50 mobilenet_v2)
Prints one JSON line per model and precision: top-1 agreement and max relative error
(max|low - fp32| / max|fp32|).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import torch_zoo_bench as z  # noqa: E402

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))


def fake_int8(module, x):
    """x and the module's weight quantized as hgraph's dynamic INT8 does, then dequantized."""
    lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
    scale = (hi - lo) / 255 if hi > lo else 1.0
    zero = int(min(max(round(-lo / scale), 0), 255))
    xq = torch.fake_quantize_per_tensor_affine(x, scale, zero, 0, 255)
    w = module.weight
    amax = w.detach().abs().reshape(w.shape[0], -1).max(1).values
    ws = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    wq = torch.fake_quantize_per_channel_affine(w, ws, torch.zeros_like(ws, dtype=torch.int32), 0, -127, 127)
    if isinstance(module, torch.nn.Conv2d):
        return module._conv_forward(xq, wq, module.bias)
    return torch.nn.functional.linear(xq, wq, module.bias)


def quantized(net):
    for m in net.modules():
        if isinstance(m, torch.nn.Linear) or (isinstance(m, torch.nn.Conv2d) and m.groups == 1):
            m.forward = (lambda mod: (lambda x: fake_int8(mod, x)))(m)
    return net


def report(name, precision, ref, low):
    print(json.dumps({"runtime": "torch_" + ("autocast" if precision == "bf16" else "fake_int8"), "model": name,
                      "precision": precision, "samples": ref.shape[0],
                      "top1_agreement": (ref.argmax(1) == low.argmax(1)).float().mean().item(),
                      "max_rel_err": ((low - ref).abs().max() / ref.abs().max()).item()}))


for name in sys.argv[1:] or ["resnet50", "mobilenet_v2"]:
    net = z.build(name)
    x = torch.randn(64, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = net(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            report(name, "bf16", ref, net(x).float())
        report(name, "int8", ref, quantized(net)(x))
