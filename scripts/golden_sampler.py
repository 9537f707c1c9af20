#!/usr/bin/python3
"""Golden values for torch.utils.data.DistributedSampler without shuffling: which indices each
rank takes for dataset sizes that divide, pad (also more than once: n < num_replicas) and trim
(drop_last), and for BatchSampler's batching of them with and without drop_last.

Usage: /usr/bin/python3 scripts/golden_sampler.py   (needs Debian's python3-torch)

Writes tests/golden/sampler.json: a list of cases {n, num_replicas, drop_last, batch_size,
ranks: [[indices of rank 0], ...], batches: [[[batch 0 of rank 0], ...], ...],
batches_drop_last: [...]}. The shuffled permutation itself is not torch's (hgraph draws its own
from seed + epoch); its padding and striding are the ones checked here.
"""
import json
import os

from torch.utils.data import BatchSampler, DistributedSampler

CASES = [(10, 2, False), (10, 3, False), (10, 3, True), (10, 4, True), (2, 5, False), (2, 5, True),
         (7, 1, False), (1, 3, False), (12, 4, False), (11, 4, True), (0, 2, False)]
BATCH = 2


def main():
    out = []
    for n, w, drop_last in CASES:
        ranks, batches, batches_dl = [], [], []
        for r in range(w):
            s = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=False, drop_last=drop_last)
            ranks.append(list(iter(s)))
            batches.append(list(BatchSampler(s, BATCH, drop_last=False)))
            batches_dl.append(list(BatchSampler(s, BATCH, drop_last=True)))
        out.append({"n": n, "num_replicas": w, "drop_last": drop_last, "batch_size": BATCH, "ranks": ranks,
                    "batches": batches, "batches_drop_last": batches_dl})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "sampler.json")
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(c) for c in out) + "\n]\n")


if __name__ == "__main__":
    main()
