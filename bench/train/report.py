#!/usr/bin/python3
"""Tables, ratios and targets of the training benchmark (bench/train/run_train.sh).

Usage: /usr/bin/python3 bench/train/report.py RESULTS.jsonl

Prints markdown: per thread count, training samples/s of hgraph lazy, hgraph eager and PyTorch
eager per (model, batch) with the ratios to PyTorch and the CPU each used per step (process
user + system time: hgraph runs its ops on hpu:0's queue worker while the main thread traces
the next step, so it can keep more than one core busy at 1 compute thread); then DDP scaling
(2 ranks x 1 thread against 2 independent 1-thread processes at the same time); then the
issue's targets as met / MISSED. A cell measured in several rounds keeps its best round.
"""
import json
import sys
from collections import defaultdict

NAMES = {"mlp": "MLP 64-64-10", "lenet5": "LeNet-5", "bert": "BERT enc s128"}
RUNTIMES = [("hgraph_lazy", "hgraph lazy"), ("hgraph_eager", "hgraph eager"), ("torch_eager", "PyTorch eager"),
            ("hgraph_trainer_lazy", "hgraph Trainer")]


def fmt(x):
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def load(path):
    speed, ddp = {}, defaultdict(list)
    for line in open(path):
        j = json.loads(line)
        tag = j.get("tag", "")
        if tag or j["runtime"].startswith("hgraph_ddp"):
            ddp[(j["model"], j["batch"])].append(j)
            continue
        key = (j["threads"], j["model"], j["batch"], j["runtime"])
        if key not in speed or j["samples_per_s"] > speed[key]["samples_per_s"]:
            speed[key] = j
    return speed, ddp


def speed_tables(speed):
    targets = []
    for t in sorted({k[0] for k in speed}):
        print(f"\n#### {t} thread{'s' if t > 1 else ''}: training samples/s (best round)\n")
        print("| model | batch | hgraph lazy | hgraph eager | PyTorch eager | lazy / PyTorch | eager / PyTorch "
              "| hgraph Trainer (lazy) | CPU per step: lazy / eager / PyTorch / Trainer | last loss: lazy / eager / PyTorch |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        cells = sorted({(k[1], k[2]) for k in speed if k[0] == t}, key=lambda c: (list(NAMES).index(c[0]), c[1]))
        for m, b in cells:
            r = {rt: speed.get((t, m, b, rt)) for rt, _ in RUNTIMES}
            sps = {rt: (j["samples_per_s"] if j else None) for rt, j in r.items()}
            cpu = {rt: (j["cpu_s"] / j["steps"] * 1e6 if j else None) for rt, j in r.items()}
            loss = {rt: (f"{j['last_loss']:.3g}" if j and "last_loss" in j else "-") for rt, j in r.items()}
            torch = sps["torch_eager"]
            ratio = {rt: (sps[rt] / torch if sps[rt] and torch else None) for rt in sps}
            print(f"| {NAMES.get(m, m)} | {b} | {fmt(sps['hgraph_lazy'])} | {fmt(sps['hgraph_eager'])} | {fmt(torch)} "
                  f"| {fmt(ratio['hgraph_lazy'])}x | {fmt(ratio['hgraph_eager'])}x | {fmt(sps['hgraph_trainer_lazy'])} "
                  f"| {' / '.join(fmt(cpu[rt]) + ' us' if cpu[rt] else '-' for rt, _ in RUNTIMES)} "
                  f"| {' / '.join(loss[rt] for rt, _ in RUNTIMES[:3])} |")
            if m in ("mlp", "lenet5") and ratio["hgraph_lazy"]:
                ok = ratio["hgraph_lazy"] >= 1.5
                targets.append(f"- {'met' if ok else 'MISSED'}: {t}T {NAMES[m]} batch {b}: lazy {ratio['hgraph_lazy']:.2f}x "
                               f"PyTorch eager (>= 1.5x); {fmt(sps['hgraph_lazy'])} vs {fmt(torch)} samples/s")
    return targets


def ddp_table(ddp):
    targets = []
    if not ddp:
        return targets
    print("\n#### DDP: 2 ranks x 1 thread against 2 independent 1-thread processes (lazy, samples/s, best round)\n")
    print("| model | batch per process | 1 process alone | 2 independent (sum) | overlap of their timed windows "
          "| DDP 2 ranks (sum) | DDP / 2 independent | DDP / 1 process |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for (m, b), rows in sorted(ddp.items(), key=lambda kv: (list(NAMES).index(kv[0][0]), kv[0][1])):
        single = max((j["samples_per_s"] for j in rows if j.get("tag") == "single"), default=None)
        # independent pairs: consecutive independent_0 / independent_1 lines of one round
        pairs, pending = [], {}
        for j in rows:
            tag = j.get("tag", "")
            if tag.startswith("independent_"):
                pending[tag] = j
                if len(pending) == 2:
                    a, c = pending["independent_0"], pending["independent_1"]
                    inter = min(a["t_end"], c["t_end"]) - max(a["t_start"], c["t_start"])
                    union = max(a["t_end"], c["t_end"]) - min(a["t_start"], c["t_start"])
                    pairs.append((a["samples_per_s"] + c["samples_per_s"], inter / union if union > 0 else 0))
                    pending = {}
        ind, overlap = max(pairs, default=(None, None))
        ddp_sps = max((j["samples_per_s"] for j in rows if j["runtime"].startswith("hgraph_ddp")), default=None)
        r_ind = ddp_sps / ind if ddp_sps and ind else None
        r_one = ddp_sps / single if ddp_sps and single else None
        print(f"| {NAMES.get(m, m)} | {b} | {fmt(single)} | {fmt(ind)} | "
              f"{'-' if overlap is None else f'{overlap:.0%}'} | {fmt(ddp_sps)} | "
              f"{'-' if r_ind is None else f'{r_ind:.0%}'} | {fmt(r_one)}x |")
        if r_ind is not None:
            targets.append(f"- {'met' if r_ind >= 0.9 else 'MISSED'}: DDP 2x1T {NAMES.get(m, m)} batch {b}/process: "
                           f"{r_ind:.0%} of 2 independent processes (>= 90%); {fmt(ddp_sps)} vs {fmt(ind)} samples/s")
    return targets


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    speed, ddp = load(sys.argv[1])
    targets = speed_tables(speed) + ddp_table(ddp)
    print("\n### Targets\n")
    print("\n".join(targets) if targets else "(no cells measured)")


if __name__ == "__main__":
    main()
