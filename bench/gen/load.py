#!/usr/bin/python3
"""Closed-loop load on a generate_stream endpoint: C clients, each sending its next request when its
previous one ended, over the same prompts (bench/gen/prompts.py); prints one JSON line with
generated tokens per second, time to first token and inter-token latency percentiles (ms).

    load.py URL MODEL --concurrency 8 --requests 64 --max-tokens 128

A token is a byte of the byte-level model: an event's text counts its UTF-8 bytes, and the time
between two events is split evenly over the second event's bytes (an event holds whole characters,
so a character of several bytes arrives at once)."""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from prompts import prompts  # noqa: E402


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def one(host, port, model, prompt, max_tokens, out):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"text_input": prompt, "parameters": {"max_tokens": max_tokens}})
    start = time.perf_counter()
    conn.request("POST", f"/v2/models/{model}/generate_stream", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    first, last, tokens, gaps = None, None, 0, []
    for raw in resp:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        if "error" in event:
            raise RuntimeError(event["error"])
        n = len(event.get("text_output", "").encode("utf-8"))
        if n == 0:
            continue
        now = time.perf_counter()
        if first is None:
            first = now - start
        else:
            gaps.extend([(now - last) / n] * n)
        last = now
        tokens += n
    conn.close()
    out.append({"ttft": first, "gaps": gaps, "tokens": tokens})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=0, help="default: 4 per client, at least 8")
    ap.add_argument("--max-tokens", type=int, default=128)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    n = a.requests or max(8, 4 * a.concurrency)
    todo = prompts(n)
    lock = threading.Lock()
    results, errors = [], []

    def client():
        while True:
            with lock:
                if not todo:
                    return
                p = todo.pop()
            try:
                one(u.hostname, u.port, a.model, p, a.max_tokens, results)
            except Exception as e:  # reported, the run goes on
                errors.append(str(e))

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    tokens = sum(r["tokens"] for r in results)
    ttft = [r["ttft"] * 1e3 for r in results if r["ttft"] is not None]
    gaps = [g * 1e3 for r in results for g in r["gaps"]]
    print(json.dumps({"runtime": "hgraph-serve", "concurrency": a.concurrency, "requests": len(results),
                      "errors": len(errors), "first_error": errors[0] if errors else None, "tokens": tokens,
                      "seconds": wall, "tokens_per_s": tokens / wall,
                      "ttft_ms_p50": percentile(ttft, 50), "ttft_ms_p99": percentile(ttft, 99),
                      "itl_ms_p50": percentile(gaps, 50), "itl_ms_p99": percentile(gaps, 99)}))


if __name__ == "__main__":
    main()
