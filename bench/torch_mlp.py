#!/usr/bin/python3
"""PyTorch peer for bench/mlp_bench.cpp: the same digits MLP weights, the same inputs shape.

Usage: /usr/bin/python3 bench/torch_mlp.py THREADS  -> one JSON line per batch size
(median microseconds per forward over 2000 calls after 200 warm-up calls)."""
import json, os, sys, time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_safetensors(path):
    return {k: torch.from_numpy(v.copy()) for k, v in safetensors_np.read(path).items()}


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(threads)
    w = read_safetensors(os.path.join(ROOT, "models/repository/digits_mlp/1/weights.safetensors"))
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    net.load_state_dict(w)
    net.eval()
    for batch in (1, 8, 32):
        x = torch.rand(batch, 64)
        times = []
        with torch.inference_mode():
            for i in range(2200):
                t0 = time.perf_counter_ns()
                net(x).numpy()
                if i >= 200:
                    times.append(time.perf_counter_ns() - t0)
        print(json.dumps({"peer": "pytorch", "threads": threads, "batch": batch,
                          "median_us": float(np.median(times)) / 1000.0}))


if __name__ == "__main__":
    main()
