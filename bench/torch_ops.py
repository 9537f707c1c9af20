#!/usr/bin/python3
"""PyTorch peer for bench/ops_bench.cpp (same shapes): eager dispatch of tiny ops and matmul
GFLOP/s, plus conv2d on ResNet-18 layer shapes and the activations / softmax when asked.

Usage: /usr/bin/python3 bench/torch_ops.py THREADS [conv] [eltwise]  -> JSON lines
{"name": ..., "us": median microseconds, "gflops": ...}"""
import json, sys, time

import torch


def median_us(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return times[len(times) // 2] / 1000.0


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(threads)
    out = []
    with torch.no_grad():
        a, b = torch.rand(4), torch.rand(4)
        out.append({"name": "DispatchAdd", "us": median_us(lambda: torch.add(a, b), 1000, 20000)})
        out.append({"name": "DispatchRelu", "us": median_us(lambda: torch.relu(a), 1000, 20000)})
        n = 64
        while n <= 2048:
            x, y = torch.rand(n, n), torch.rand(n, n)
            reps = max(5, int(2e9 / (2 * n ** 3)))
            us = median_us(lambda: torch.matmul(x, y), 3, reps)
            out.append({"name": f"Matmul/{n}", "us": us, "gflops": 2 * n ** 3 / us / 1e3})
            n *= 2
        if "eltwise" in sys.argv[2:]:
            for shape_name, shape, dtype in ELTWISE_SHAPES:
                x = torch.rand(*shape).mul_(8).sub_(4).to(dtype)
                for op_name, f in ELTWISE_OPS:
                    us = median_us(lambda: f(x), 20, max(50, int(2e5 / max(1, x.numel() // 1000))))
                    out.append({"name": f"Eltwise/{op_name}/{shape_name}", "us": us})
        if "conv" in sys.argv[2:]:
            for name, c_in, c_out, k, s, hw in CONV_SHAPES:
                x = torch.rand(1, c_in, hw, hw)
                w = torch.rand(c_out, c_in, k, k)
                f = lambda: torch.nn.functional.conv2d(x, w, None, s, k // 2)
                us = median_us(f, 5, 50)
                ho = (hw + 2 * (k // 2) - k) // s + 1
                flops = 2 * c_out * ho * ho * c_in * k * k
                out.append({"name": f"Conv/{name}", "us": us, "gflops": flops / us / 1e3})
    for o in out:
        print(json.dumps(o))


F = torch.nn.functional
# The activations and softmax of bench/ops_bench.cpp (softmax over the last dim).
ELTWISE_OPS = [
    ("relu", torch.relu),
    ("gelu_erf", F.gelu),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    ("silu", F.silu),
    ("tanh", torch.tanh),
    ("sigmoid", torch.sigmoid),
    ("softmax", lambda x: torch.softmax(x, -1)),
    ("log_softmax", lambda x: torch.log_softmax(x, -1)),
]
ELTWISE_SHAPES = [
    ("1x64", (1, 64), torch.float32),
    ("64x1000", (64, 1000), torch.float32),
    ("256x4096", (256, 4096), torch.float32),
    ("4x128x128", (4, 128, 128), torch.float32),
    ("256x4096_bf16", (256, 4096), torch.bfloat16),
]

# ResNet-18 conv layers at batch 1, 224x224 input: (name, in, out, kernel, stride, input size)
CONV_SHAPES = [
    ("conv1", 3, 64, 7, 2, 224),
    ("layer1", 64, 64, 3, 1, 56),
    ("layer2_down", 64, 128, 3, 2, 56),
    ("layer2", 128, 128, 3, 1, 28),
    ("layer3_down", 128, 256, 3, 2, 28),
    ("layer3", 256, 256, 3, 1, 14),
    ("layer4_down", 256, 512, 3, 2, 14),
    ("layer4", 512, 512, 3, 1, 7),
]

if __name__ == "__main__":
    main()
