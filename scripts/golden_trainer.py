#!/usr/bin/python3
"""Golden values for the Trainer's optimization semantics, from a PyTorch loop written the way
Lightning runs automatic optimization.

Usage: /usr/bin/python3 scripts/golden_trainer.py   (needs Debian's python3-torch)

Writes tests/golden/trainer.json: an MLP 8-16-3 (Linear, ReLU, Linear; keys as
hg::models::zoo::mlp), 20 examples in batches of 4 (no shuffle), 2 epochs of SGD (lr 0.1,
momentum 0.9) with accumulate_grad_batches 2 (loss / 2; the epoch's last, odd batch steps alone)
and gradient_clip_val 0.5 (norm) before each step. Records the initial and final parameters,
every batch's loss and each epoch's batch-size-weighted mean loss.
"""
import json
import os

import torch

torch.manual_seed(0)
N, BATCH, ACC, EPOCHS, CLIP = 20, 4, 2, 2, 0.5
x = torch.randn(N, 8)
y = torch.randint(0, 3, (N,))
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
init = {k: v.detach().clone() for k, v in net.state_dict().items()}
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

batches = [(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, N, BATCH)]
losses, epoch_means, steps = [], [], 0
for epoch in range(EPOCHS):
    total = 0.0
    for i, (xb, yb) in enumerate(batches):
        if i % ACC == 0:
            opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xb), yb)
        (loss / ACC).backward()
        losses.append(loss.item())
        total += loss.item() * len(yb)
        if (i + 1) % ACC == 0 or i + 1 == len(batches):
            torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
            opt.step()
            steps += 1
    epoch_means.append(total / N)


def tensors(sd):
    return {k: {"shape": list(v.shape), "data": v.flatten().tolist()} for k, v in sd.items()}


out = {
    "x": {"shape": [N, 8], "data": x.flatten().tolist()},
    "y": y.tolist(),
    "batch_size": BATCH, "accumulate_grad_batches": ACC, "max_epochs": EPOCHS, "gradient_clip_val": CLIP,
    "lr": 0.1, "momentum": 0.9,
    "init": tensors(init),
    "final": tensors(net.state_dict()),
    "losses": losses,
    "epoch_mean_loss": epoch_means,
    "global_step": steps,
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "trainer.json")
with open(path, "w") as f:
    json.dump(out, f)
print("wrote", os.path.normpath(path))
