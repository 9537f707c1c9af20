#!/usr/bin/python3
"""PyTorch running an hgraph-train config's recipe on Fashion-MNIST: the same model
(scripts/torch_zoo.py's LeNet5, or the mlp's Linear-ReLU stack), optimizer (AdamW / Adam / SGD
with the config's lr, weight decay, momentum), cosine schedule per epoch, batch size, epochs,
held-out fraction, image size (zero padding to 32 for LeNet-5) and augmentation (random crop
with padding, horizontal flip), on the same IDX files, with torch.set_num_threads(THREADS).

    fashion.py CONFIG.json OUT.csv [--threads 1] [--epochs N]
        per-epoch CSV: epoch, train_loss, val_loss, val_acc, seconds (the epoch's wall time);
        then one JSON line: test_acc, test_loss, epochs, fit_seconds, seconds_per_epoch.
"""
import argparse
import csv
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../scripts"))
import torch_zoo  # noqa: E402


def read_idx(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(d, name, image_size, flatten):
    x = read_idx(os.path.join(d, f"{name}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(d, f"{name}-labels-idx1-ubyte.gz")).astype(np.int64)
    x = torch.from_numpy(x).unsqueeze(1)
    if image_size and image_size > x.shape[-1]:
        p = (image_size - x.shape[-1]) // 2
        x = F.pad(x, (p, image_size - x.shape[-1] - p, p, image_size - x.shape[-1] - p))
    if flatten:
        x = x.flatten(1)
    return x, torch.from_numpy(y)


def augment(x, pad, hflip, gen):
    if pad:
        n, _, h, w = x.shape
        big = F.pad(x, (pad, pad, pad, pad))
        oy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
        ox = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
        x = torch.stack([big[i, :, oy[i]:oy[i] + h, ox[i]:ox[i] + w] for i in range(n)])
    if hflip:
        flip = torch.rand(x.shape[0], generator=gen) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    return x


def pair(v):
    return tuple(v) if isinstance(v, list) else (v, v)


def sequential(layers):
    """hgraph's "sequential" layer list (models/layer_spec.h) as torch.nn layers."""
    out = []
    for l in layers:
        op = l["op"]
        if op == "linear":
            out.append(nn.Linear(l["in_features"], l["out_features"], bias=l.get("bias", True)))
        elif op == "conv2d":
            out.append(nn.Conv2d(l["in_channels"], l["out_channels"], pair(l["kernel"]), pair(l.get("stride", 1)),
                                 pair(l.get("padding", 0)), pair(l.get("dilation", 1)), l.get("groups", 1), l.get("bias", True)))
        elif op in ("max_pool2d", "avg_pool2d"):
            cls = nn.MaxPool2d if op == "max_pool2d" else nn.AvgPool2d
            out.append(cls(pair(l["kernel"]), pair(l.get("stride", l["kernel"])) if l.get("stride", 0) else None, pair(l.get("padding", 0))))
        elif op == "adaptive_avg_pool2d":
            out.append(nn.AdaptiveAvgPool2d(pair(l["output_size"])))
        elif op == "batch_norm2d":
            out.append(nn.BatchNorm2d(l["num_features"], l.get("eps", 1e-5), l.get("momentum", 0.1)))
        elif op == "layer_norm":
            out.append(nn.LayerNorm(l["dim"], l.get("eps", 1e-5)))
        elif op == "flatten":
            out.append(nn.Flatten(l.get("start_dim", 1), l.get("end_dim", -1)))
        elif op == "dropout":
            out.append(nn.Dropout(l.get("p", 0.5)))
        elif op == "gelu":
            out.append(nn.GELU(l.get("approximate", "none")))
        else:
            out.append({"relu": nn.ReLU, "silu": nn.SiLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[op]())
    return nn.Sequential(*out)


def make_model(m):
    if m["name"] == "sequential":
        return sequential(m["config"]["layers"])
    if m["name"] == "lenet5":
        return torch_zoo.LeNet5(m.get("config", {}).get("classes", 10))
    sizes = m.get("config", {}).get("sizes", [64, 64, 10])
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def make_optimizer(o, params):
    name = o["name"]
    if name == "sgd":
        return torch.optim.SGD(params, lr=o.get("lr", 0.01), momentum=o.get("momentum", 0), weight_decay=o.get("weight_decay", 0))
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return cls(params, lr=o.get("lr", 1e-3), weight_decay=o.get("weight_decay", 0.01 if name == "adamw" else 0))


def evaluate(net, x, y, batch=256):
    net.eval()
    loss, hits = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(y), batch):
            out = net(x[i:i + batch])
            loss += F.cross_entropy(out, y[i:i + batch], reduction="sum").item()
            hits += (out.argmax(1) == y[i:i + batch]).sum().item()
    net.train()
    return loss / len(y), hits / len(y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--seed", type=int, default=None, help="the seed of the weights and the data order (default: 0 and the config's data.seed)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed or 0)
    c = json.load(open(a.config))
    d, m, o, t = c["data"], c["model"], c["optimizer"], c["trainer"]
    path = d.get("path", "/usr/share/datasets/fashion-mnist")
    image_size = d.get("image_size", 32 if m["name"] == "lenet5" else 0)
    flatten = m["name"] == "mlp" or (m["name"] == "sequential" and len(m["config"]["input"]) == 1)
    t_start = time.time()
    x, y = load(path, "train", image_size, flatten)
    xt, yt = load(path, "t10k", image_size, flatten)
    gen = torch.Generator().manual_seed(d.get("seed", 0) if a.seed is None else a.seed)
    perm = torch.randperm(len(y), generator=gen)
    hold = int(len(y) * d.get("holdout_fraction", 0.1))
    xv, yv, xs, ys = x[perm[:hold]], y[perm[:hold]], x[perm[hold:]], y[perm[hold:]]
    net = make_model(m)
    opt = make_optimizer(o, net.parameters())
    epochs = a.epochs or t["max_epochs"]
    sched = o.get("scheduler")
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=sched["t_max"]) if sched and sched["name"] == "cosine" else None
    batch = d.get("batch_size", 32)
    rows = []
    fit_start = time.time()
    for e in range(epochs):
        t0 = time.time()
        order = torch.randperm(len(ys), generator=gen)
        total, n = 0.0, 0
        for i in range(0, len(ys), batch):
            idx = order[i:i + batch]
            xb = xs[idx]
            if d.get("crop_padding", 0) or d.get("hflip", False):
                xb = augment(xb, d.get("crop_padding", 0), d.get("hflip", False), gen)
            loss = F.cross_entropy(net(xb), ys[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            n += len(idx)
        if cos:
            cos.step()
        seconds = time.time() - t0
        vl, va = evaluate(net, xv, yv)
        rows.append({"epoch": e, "train_loss": total / n, "val_loss": vl, "val_acc": va, "seconds": seconds})
        print(f"torch epoch {e}: train_loss {total / n:.4f} val_acc {va:.4f} ({seconds:.1f} s)", file=sys.stderr)
    fit_seconds = time.time() - fit_start
    tl, ta = evaluate(net, xt, yt)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(json.dumps({"framework": "pytorch " + torch.__version__, "model": m["name"], "seed": a.seed, "test_acc": ta, "test_loss": tl,
                      "epochs": epochs, "fit_seconds": fit_seconds, "seconds_per_epoch": fit_seconds / epochs,
                      "run_seconds": time.time() - t_start, "threads": a.threads}))


if __name__ == "__main__":
    main()
