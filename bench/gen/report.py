#!/usr/bin/python3
"""The generation benchmark's table and targets from run_gen.sh's results.jsonl:
throughput at c=32 >= 6x c=1; >= 3x PyTorch at c=32; inter-token p99 at c=32 <= 3x its p50;
time to first token p99 at c=8 <= 50 ms."""
import json
import sys


def main():
    rows = [json.loads(line) for line in open(sys.argv[1])]
    hg = {r["concurrency"]: r for r in rows if r["runtime"] == "hgraph-serve"}
    pt = {r["concurrency"]: r for r in rows if r["runtime"].startswith("pytorch")}
    print("| concurrency | runtime | tokens/s | TTFT p50 / p99 (ms) | inter-token p50 / p99 (ms) | errors |")
    print("|---:|---|---:|---|---|---:|")
    for c in sorted(set(hg) | set(pt)):
        for r in (hg.get(c), pt.get(c)):
            if r:
                print(f"| {c} | {r['runtime']} | {r['tokens_per_s']:,.0f} | {r['ttft_ms_p50']:.1f} / {r['ttft_ms_p99']:.1f} | "
                      f"{r['itl_ms_p50']:.2f} / {r['itl_ms_p99']:.2f} | {r['errors']} |")
    print()
    def target(ok, text):
        print(("- met: " if ok else "- MISSED: ") + text)
    if 1 in hg and 32 in hg:
        x = hg[32]["tokens_per_s"] / hg[1]["tokens_per_s"]
        target(x >= 6, f"throughput at c=32 is {x:.1f}x c=1 (>= 6x)")
    if 32 in hg and 32 in pt:
        x = hg[32]["tokens_per_s"] / pt[32]["tokens_per_s"]
        target(x >= 3, f"throughput at c=32 is {x:.2f}x PyTorch's (>= 3x)")
    if 32 in hg:
        x = hg[32]["itl_ms_p99"] / hg[32]["itl_ms_p50"]
        target(x <= 3, f"inter-token p99 at c=32 is {x:.1f}x its p50 (<= 3x)")
    if 8 in hg:
        target(hg[8]["ttft_ms_p99"] <= 50, f"time to first token p99 at c=8 is {hg[8]['ttft_ms_p99']:.1f} ms (<= 50 ms)")
    for c in sorted(hg):
        if c in pt:
            print(f"- c={c}: hgraph / PyTorch tokens/s {hg[c]['tokens_per_s'] / pt[c]['tokens_per_s']:.2f}")


if __name__ == "__main__":
    main()
