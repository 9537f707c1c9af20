#!/usr/bin/python3
"""PyTorch's side of the training benchmark of issue 7: the same models (scripts/torch_zoo.py,
state_dict keys equal to hgraph's zoo), the same initial weights and batches (the files
`hg_train_bench prepare` writes), the same optimizer (SGD, momentum 0.9, the same lr), the same
threads (torch.set_num_threads), an eager training loop on the CPU.

    torch_train.py run DIR --model mlp|lenet5|bert --batch B --threads T [--seconds 3] [--warmup 5]
        one JSON line like hg_train_bench run: samples_per_s, steps, seconds, cpu_s, losses.
    torch_train.py digits DIR OUT.csv [--epochs 30] [--batch 32] [--threads 1]
        the digits MLP over DIR/digits/order.safetensors, per-epoch CSV as hg_train_bench digits.
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../scripts"))
import torch_zoo  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import safetensors_np  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
DTYPES = {"F32": np.float32, "I64": np.int64, "U8": np.uint8}
MOMENTUM = 0.9


def read_safetensors(path):
    """name -> numpy array, the header's offsets checked."""
    return safetensors_np.read(path)


def make_model(model):
    if model in ("mlp", "digits"):
        return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    if model == "lenet5":
        return torch_zoo.LeNet5()
    if model == "bert":
        return torch_zoo.BertClassifier()
    raise ValueError(f"unknown model {model}")


def learning_rate(model):
    return 0.1 if model in ("mlp", "digits") else 0.01


def load_model(model, d):
    net = make_model(model)
    w = read_safetensors(os.path.join(d, "init.safetensors"))
    net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in w.items()}, strict=True)
    return net.train()


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(a):
    d = os.path.join(a.dir, f"{a.model}_b{a.batch}")
    net = load_model(a.model, d)
    data = read_safetensors(os.path.join(d, "data.safetensors"))
    x, y = torch.from_numpy(data["x"].copy()), torch.from_numpy(data["y"].copy())
    batches = [(x[i:i + a.batch], y[i:i + a.batch]) for i in range(0, len(y) - a.batch + 1, a.batch)]
    opt = torch.optim.SGD(net.parameters(), lr=learning_rate(a.model), momentum=MOMENTUM)
    state = {"next": 0}

    def step():
        xb, yb = batches[state["next"] % len(batches)]
        state["next"] += 1
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    first = step().item()
    for _ in range(1, a.warmup):
        step()
    cpu0, t0, steps = cpu_seconds(), time.perf_counter(), 0
    while (steps < a.steps) if a.steps > 0 else (steps < 3 or time.perf_counter() - t0 < a.seconds):
        loss = step()
        steps += 1
    last = loss.item()
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    print(json.dumps({"runtime": "torch_eager", "model": a.model, "batch": a.batch, "threads": a.threads,
                      "steps": steps, "seconds": wall, "samples_per_s": steps * a.batch / wall, "cpu_s": cpu,
                      "first_loss": first, "last_loss": last, "torch": torch.__version__, "tag": a.tag}),
          flush=True)


def digits(a):
    d = os.path.join(a.dir, "digits")
    net = load_model("digits", d)
    order = read_safetensors(os.path.join(d, "order.safetensors"))
    raw = read_safetensors(os.path.join(ROOT, "models/data/digits.safetensors"))
    xs = torch.from_numpy(raw["images"].astype(np.float32) / 16.0)
    ys = torch.from_numpy(raw["labels"].astype(np.int64))
    val = torch.from_numpy(order["val"].copy())
    opt = torch.optim.SGD(net.parameters(), lr=learning_rate("digits"), momentum=MOMENTUM)
    rows = ["epoch,train_loss,val_loss,val_acc"]
    epochs = min(a.epochs, order["order"].shape[0])
    for e in range(epochs):
        ord_e = torch.from_numpy(order["order"][e].copy())
        net.train()
        losses = []
        for s in range(0, len(ord_e) - a.batch + 1, a.batch):
            idx = ord_e[s:s + a.batch]
            loss = F.cross_entropy(net(xs[idx]), ys[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        net.eval()
        with torch.no_grad():
            logits = net(xs[val])
            vl = F.cross_entropy(logits, ys[val]).item()
            acc = (logits.argmax(1) == ys[val]).double().mean().item()
        rows.append(f"{e},{sum(losses) / len(losses)},{vl},{acc}")
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(rows) + "\n")
    os.replace(tmp, a.out)
    print("wrote", a.out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cmd", choices=["run", "digits"])
    p.add_argument("dir")
    p.add_argument("out", nargs="?")
    p.add_argument("--model", default="mlp")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=0, help="exactly this many timed steps (0: --seconds)")
    p.add_argument("--tag", default="", help="copied into the JSON line")
    p.add_argument("--epochs", type=int, default=30)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.cmd == "run":
        run(a)
    else:
        if not a.out:
            p.error("digits needs OUT.csv")
        digits(a)


if __name__ == "__main__":
    main()
