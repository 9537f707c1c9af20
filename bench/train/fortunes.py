#!/usr/bin/python3
"""PyTorch running an hgraph-train config's byte-level GPT recipe (training/configs/
fortunes_gpt.json): the same model (scripts/torch_gpt.py, state_dict keys equal to hgraph's),
the same corpus rules (every regular file under the path in sorted order, links to a file read
once, files that are not UTF-8 text skipped, each file ending in a newline), the same split (the
last holdout_fraction of the bytes), the same non-overlapping blocks of max_len + 1 bytes, batch,
AdamW, cosine schedule per step, gradient clipping, steps and validation cadence, with
torch.set_num_threads(THREADS).

    fortunes.py CONFIG.json OUT.csv [--threads 1] [--steps N]
        CSV: step, train_loss, val_loss (every val_check_interval steps on limit_val_batches);
        then one JSON line: test_loss (nats per byte on the whole held-out split), test_bpb,
        steps, fit_seconds, seconds_per_step, and a greedy sample.
"""
import argparse
import csv
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../scripts"))
from torch_gpt import GPT  # noqa: E402


def read_corpus(path):
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if os.path.isfile(os.path.join(d, f)))
    seen, out = set(), bytearray()
    for f in files:
        real = os.path.realpath(f)
        if real in seen:
            continue
        seen.add(real)
        data = open(f, "rb").read()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if b"\0" in data or not data:
            continue
        out += data if data.endswith(b"\n") else data + b"\n"
    return bytes(out)


def blocks(data, max_len):
    n = (len(data) - max_len - 1) // max_len + 1
    arr = np.frombuffer(data, dtype=np.uint8)
    idx = np.arange(n)[:, None] * max_len + np.arange(max_len + 1)[None, :]
    return torch.from_numpy(arr[idx].astype(np.int64))


def evaluate(net, b, batch, limit=None):
    net.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for k, i in enumerate(range(0, len(b), batch)):
            if limit is not None and k >= limit:
                break
            x = b[i:i + batch]
            logits = net(x[:, :-1])
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").item()
            count += x[:, 1:].numel()
    net.train()
    return total / count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    c = json.load(open(a.config))
    d, m, o, t = c["data"], c["model"]["config"], c["optimizer"], c["trainer"]
    torch.manual_seed(c["model"].get("seed", 0))
    data = read_corpus(d["path"])
    cut = len(data) - int(len(data) * d.get("holdout_fraction", 0.1))
    max_len = m.get("max_len", 256)
    train, held = blocks(data[:cut], max_len), blocks(data[cut:], max_len)
    net = GPT(vocab=m.get("vocab", 256), d_model=m.get("d_model", 128), nhead=m.get("nhead", 4),
              layers=m.get("layers", 2), ff=m.get("ff", 512), max_len=max_len)
    opt = torch.optim.AdamW(net.parameters(), lr=o["lr"], weight_decay=o.get("weight_decay", 0.01))
    steps = a.steps or t["max_steps"]
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=o["scheduler"]["t_max"] if not a.steps else steps)
    batch, vbatch = d.get("batch_size", 32), d.get("val_batch_size", 256)
    every, vlimit, clip = t.get("val_check_interval", steps), t.get("limit_val_batches"), t.get("gradient_clip_val")
    gen = torch.Generator().manual_seed(d.get("seed", 0))
    rows, step, start = [], 0, time.time()
    while step < steps:
        order = torch.randperm(len(train), generator=gen)
        for i in range(0, len(order), batch):
            x = train[order[i:i + batch]]
            logits = net(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
            opt.step()
            sched.step()
            step += 1
            row = {"step": step, "train_loss": loss.item(), "val_loss": ""}
            if step % every == 0:
                row["val_loss"] = evaluate(net, held, vbatch, vlimit)
                print(f"torch step {step}: val_loss {row['val_loss']:.4f}", file=sys.stderr)
            rows.append(row)
            if step >= steps:
                break
    fit = time.time() - start
    test = evaluate(net, held, vbatch)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "train_loss", "val_loss"])
        w.writeheader()
        w.writerows(rows)
    prompt = torch.tensor([list(b"Q: What")])
    sample = bytes(net.generate_greedy(prompt, 60)[0].tolist()).decode("utf-8", "replace")
    print(json.dumps({"framework": "pytorch " + torch.__version__, "test_loss": test, "test_bpb": test / math.log(2),
                      "steps": steps, "fit_seconds": fit, "seconds_per_step": fit / steps, "threads": a.threads,
                      "sample": sample}))


if __name__ == "__main__":
    main()
