#!/usr/bin/python3
"""PyTorch's own reduced precision on the brought models, the yardstick for hgraph's agreement
figures: torch.autocast("cpu", bfloat16) against FP32 on 64 seeded standard-normal images.
    /usr/bin/python3 bench/torch_precision.py [MODEL...]   (default resnet50 mobilenet_v2)
Prints one JSON line per model: top-1 agreement and max relative error (max|bf16 - fp32| / max|fp32|).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import torch_zoo_bench as z  # noqa: E402

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
for name in sys.argv[1:] or ["resnet50", "mobilenet_v2"]:
    net = z.build(name)
    x = torch.randn(64, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = net(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = net(x).float()
    print(json.dumps({"runtime": "torch_autocast", "model": name, "precision": "bf16", "samples": 64,
                      "top1_agreement": (ref.argmax(1) == low.argmax(1)).float().mean().item(),
                      "max_rel_err": ((low - ref).abs().max() / ref.abs().max()).item()}))
