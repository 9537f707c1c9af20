#!/usr/bin/python3
"""Does hgraph-serve give memory back after a burst? RSS before, at the peak of and 30 s after a
burst of large KServe v2 JSON requests, for each way of returning freed heap memory.

    /usr/bin/python3 bench/serve/burst_memory.py build/server/hgraph-serve [--rounds 2]

Starts hgraph-serve on an ephemeral port of 127.0.0.1 over a temporary repository with one
identity model (FP32 [1, 262144]: a 2.6 MB JSON body, the same answered back) and one with a
small input, FP32 [1, 64], then per variant and round: 20 s of warm-up traffic on one connection
(the baseline is the RSS after it settles), a burst of 32 connections each sending 8 large and
64 small requests, then 30 s idle, sampling VmRSS every 0.5 s. Variants, interleaved per round:
  glibc        the server as is, --trim-idle-ms 0 (nothing is given back on purpose)
  trim         --trim-idle-ms 1000 (the default: malloc_trim once no request has been busy for 1 s)
  mmap         --trim-idle-ms 0 with GLIBC_TUNABLES mmap_threshold=256 KiB (large buffers are
               mapped and unmapped on their own; the dynamic threshold is off)
  jemalloc     --trim-idle-ms 0 with LD_PRELOAD of Debian's libjemalloc2 (skipped when absent)
Printed per variant: baseline, peak and after-30 s RSS in MB, the after/baseline ratio (the
target: within 10 %), and the burst's duration (what the allocator costs under load).
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_proc import start_server  # noqa: E402

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
BIG = 262144


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def make_repo(root):
    for name, n in (("big", BIG), ("small", 64)):
        os.makedirs(os.path.join(root, name, "1"))
        cfg = {"platform": "identity", "max_batch_size": 8,
               "input": [{"name": "IN", "datatype": "FP32", "dims": [n]}],
               "output": [{"name": "OUT", "datatype": "FP32", "dims": [n]}]}
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump(cfg, f)


def body(n, seed):
    data = [((i * 7919 + seed) % 1000) / 997.0 for i in range(n)]
    return json.dumps({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, n], "data": data}]}).encode()


def start(binary, repo, variant):
    env = dict(os.environ)
    args = [binary, "--host", "127.0.0.1", "--port", "0", "--model-repository", repo,
            "--trim-idle-ms", "1000" if variant == "trim" else "0"]
    if variant == "mmap":
        env["GLIBC_TUNABLES"] = "glibc.malloc.mmap_threshold=262144"
    if variant == "jemalloc":
        env["LD_PRELOAD"] = JEMALLOC
    return start_server(args, env)


def send(port, bodies, model_of):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for b in bodies:
        c.request("POST", f"/v2/models/{model_of(b)}/infer", b, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise SystemExit(f"infer answered {r.status}")
    c.close()


def run(binary, repo, variant, big, small):
    proc, port = start(binary, repo, variant)
    model_of = lambda b: "big" if len(b) > 100000 else "small"  # noqa: E731
    try:
        end = time.time() + 20
        while time.time() < end:
            send(port, [big[0], small[0]] * 4, model_of)
        time.sleep(3)
        base = rss_mb(proc.pid)
        t0 = time.time()
        peak = base
        threads = [threading.Thread(target=send, args=(port, [big[i % len(big)]] * 8 + [small[i % len(small)]] * 64,
                                                       model_of)) for i in range(32)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, rss_mb(proc.pid))
            time.sleep(0.05)
        burst_s = time.time() - t0
        samples = []
        end = time.time() + 30
        while time.time() < end:
            samples.append(rss_mb(proc.pid))
            time.sleep(0.5)
        return base, max(peak, *samples[:1]), samples[-1], burst_s
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="glibc,trim,mmap,jemalloc")
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v != "jemalloc" or os.path.exists(JEMALLOC)]
    big = [body(BIG, s) for s in range(4)]
    small = [body(64, s) for s in range(8)]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"cpu: {cpu}; burst: 32 connections x (8 x {len(big[0]) / 1e6:.1f} MB + 64 small) JSON infer requests")
    results = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as root:
        make_repo(root)
        for r in range(a.rounds):
            for v in variants:
                results[v].append(run(a.binary, root, v, big, small))
                b, p, after, s = results[v][-1]
                print(f"  round {r + 1} {v:9s} baseline {b:7.1f} MB  peak {p:7.1f} MB  after 30 s {after:7.1f} MB  "
                      f"burst {s:5.1f} s", flush=True)
    print("\n| variant | baseline MB | peak MB | after 30 s MB | after / baseline | burst s |")
    print("|---|---|---|---|---|---|")
    for v in variants:
        rows = results[v]
        med = lambda i: statistics.median(x[i] for x in rows)  # noqa: E731
        print(f"| {v} | {med(0):.1f} | {med(1):.1f} | {med(2):.1f} | {med(2) / med(0):.2f} | {med(3):.1f} |")


if __name__ == "__main__":
    main()
