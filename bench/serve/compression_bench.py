#!/usr/bin/python3
"""What request and response compression costs and gains on hgraph-serve over loopback, for a
large binary-tensor request (the identity model echoes it back, binary too).

    python3 bench/serve/compression_bench.py build/server/hgraph-serve [--iters 30]

Starts hgraph-serve on an ephemeral port over a temporary repository with two identity models
(FP32 [1, 262144] = 1 MiB and [1, 1048576] = 4 MiB) and an access log. For each size and each data
kind (`normal`: random N(0,1) floats, which deflate barely shrinks; `relu`: the same with the
negatives set to 0, as activations are) it sends, interleaved, `iters` requests of each variant on
one keep-alive connection:
  plain      uncompressed both ways
  gzip-req   the request gzipped (Content-Encoding: gzip), the answer plain
  gzip-resp  the request plain, Accept-Encoding: gzip (the client inflates the answer)
  gzip-both  both
The request bodies are compressed once beforehand (level 1, as the server compresses): the client's
own compression time is printed apart. Printed per variant: the median end-to-end latency (send to
the last byte, the answer inflated), the server's median duration_us from the access log (complete
head to the answer going out: reading and inflating the body, the model, compressing the answer),
and the wire sizes. The server-side inflate cost is gzip-req's duration minus plain's, per MiB of
decompressed body.
"""
import argparse
import gzip
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_proc  # noqa: E402

SIZES = {"echo1m": 262144, "echo4m": 1048576}


def start_server(binary, repo, log):
    return serve_proc.start_server([binary, "--host", "127.0.0.1", "--port", "0", "--model-repository", repo,
                                    "--access-log", log])


def make_repo(root):
    for name, n in SIZES.items():
        os.makedirs(os.path.join(root, name, "1"))
        cfg = {"platform": "identity", "max_batch_size": 1,
               "input": [{"name": "IN", "datatype": "FP32", "dims": [n]}],
               "output": [{"name": "OUT", "datatype": "FP32", "dims": [n]}]}
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump(cfg, f)


def body_for(n, kind, rng):
    x = rng.standard_normal(n).astype("<f4")
    if kind == "relu":
        x = np.maximum(x, 0).astype("<f4")
    head = json.dumps({"inputs": [{"name": "IN", "shape": [1, n], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 4 * n}}],
                       "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}]}).encode()
    return head, head + x.tobytes()


def one(conn, model, body, headers):
    t0 = time.perf_counter()
    conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        sys.exit(f"{model}: HTTP {r.status}: {data[:300]!r}")
    if r.getheader("Content-Encoding") == "gzip":
        data = gzip.decompress(data)
    return time.perf_counter() - t0, len(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        log = os.path.join(tmp, "access.log")
        make_repo(repo)
        proc, port = start_server(args.server, repo, log)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            rows = []
            for model, n in SIZES.items():
                for kind in ("normal", "relu"):
                    head, body = body_for(n, kind, rng)
                    t0 = time.perf_counter()
                    packed = zlib.compress(body, 1, wbits=31)  # gzip, level 1
                    client_gzip_ms = (time.perf_counter() - t0) * 1e3
                    base = {"Content-Type": "application/octet-stream",
                            "Inference-Header-Content-Length": str(len(head))}
                    variants = {
                        "plain": (body, base),
                        "gzip-req": (packed, {**base, "Content-Encoding": "gzip"}),
                        "gzip-resp": (body, {**base, "Accept-Encoding": "gzip"}),
                        "gzip-both": (packed, {**base, "Content-Encoding": "gzip", "Accept-Encoding": "gzip"}),
                    }
                    lat = {v: [] for v in variants}
                    order = []
                    for _ in range(2):  # warm-up
                        for v, (b, h) in variants.items():
                            one(conn, model, b, h)
                    mark = os.path.getsize(log)
                    for _ in range(args.iters):
                        for v, (b, h) in variants.items():
                            lat[v].append(one(conn, model, b, h)[0])
                            order.append(v)
                    with open(log) as f:
                        f.seek(mark)
                        recs = [json.loads(line) for line in f if line.strip()]
                    server_us = {v: [] for v in variants}
                    for v, rec in zip(order, recs):
                        server_us[v].append(rec["duration_us"])
                    sizes = {v: (len(b), recs[order.index(v)]["response_bytes"]) for v, (b, h) in variants.items()}
                    for v in variants:
                        rows.append((model, kind, v, statistics.median(lat[v]) * 1e3, statistics.median(server_us[v]),
                                     sizes[v][0], sizes[v][1], client_gzip_ms))
            print(f"{'model':8} {'data':6} {'variant':9} {'e2e ms':>8} {'server us':>10} {'req bytes':>10} "
                  f"{'resp bytes':>10} {'client gzip ms':>14}")
            for r in rows:
                print(f"{r[0]:8} {r[1]:6} {r[2]:9} {r[3]:8.2f} {r[4]:10.0f} {r[5]:10d} {r[6]:10d} {r[7]:14.1f}")
            print("\nserver-side inflate (gzip-req minus plain server duration), per MiB decompressed:")
            for model, n in SIZES.items():
                for kind in ("normal", "relu"):
                    d = {r[2]: r[4] for r in rows if r[0] == model and r[1] == kind}
                    mib = 4 * n / 2**20
                    print(f"  {model} {kind}: {(d['gzip-req'] - d['plain']) / mib / 1e3:.2f} ms/MiB")
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
