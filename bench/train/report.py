#!/usr/bin/python3
"""Tables, ratios and targets of the training benchmark (bench/train/run_train.sh).

Usage: /usr/bin/python3 bench/train/report.py RESULTS.jsonl

Prints markdown: per thread count, training samples/s of hgraph lazy, replay (graphs::StepReplay),
eager, the Trainer (lazy, replay_steps) and PyTorch eager per (model, batch) with the ratios to PyTorch and the CPU each used per step (process
user + system time: hgraph runs its ops on hpu:0's queue worker while the main thread traces
the next step, so it can keep more than one core busy at 1 compute thread); then DDP scaling
(2 ranks x 1 thread against 2 independent 1-thread processes at the same time); then the
issue's targets as met / MISSED. A cell measured in several rounds keeps its best round.
"""
import json
import sys
from collections import defaultdict

NAMES = {"mlp": "MLP 64-64-10", "lenet5": "LeNet-5", "bert": "BERT enc s128"}
# (key, column title); _s10: the loss read every 10 steps instead of every step
RUNTIMES = [("torch_eager", "PyTorch eager"), ("hgraph_lazy", "hgraph lazy"), ("hgraph_lazy_s10", "lazy, read / 10"),
            ("hgraph_replay", "hgraph replay"), ("hgraph_replay_s10", "replay, read / 10"),
            ("hgraph_eager", "hgraph eager"), ("hgraph_eager_s10", "eager, read / 10"),
            ("hgraph_trainer_lazy", "hgraph Trainer"), ("hgraph_trainer_replay", "Trainer, replay")]


def fmt(x):
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def load(path):
    speed, ddp, check = {}, defaultdict(list), defaultdict(dict)
    for line in open(path):
        if not line.startswith("{"):  # a log line of the Trainer
            continue
        j = json.loads(line)
        tag = j.get("tag", "")
        if tag == "check":
            check[(j["model"], j["batch"], j["steps"])][j["runtime"]] = j
            continue
        if tag or j["runtime"].startswith("hgraph_ddp"):
            ddp[(j["model"], j["batch"], j["runtime"].rsplit("_", 1)[1])].append(j)
            continue
        rt = j["runtime"]
        if j.get("sync_every", 1) != 1:
            rt += f"_s{j['sync_every']}"
        key = (j["threads"], j["model"], j["batch"], rt)
        if key not in speed or j["samples_per_s"] > speed[key]["samples_per_s"]:
            speed[key] = j
    return speed, ddp, check


def check_table(check):
    if not check:
        return
    print("\n#### Same steps, same loss: the loss after the warm-up + N steps from the same init and batches\n")
    print("| model | batch | steps | hgraph lazy | hgraph replay | hgraph eager | PyTorch eager |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (m, b, n), r in sorted(check.items(), key=lambda kv: (list(NAMES).index(kv[0][0]), kv[0][1])):
        loss = [f"{r[rt]['last_loss']:.9g}" if rt in r else "-"
                for rt in ("hgraph_lazy", "hgraph_replay", "hgraph_eager", "torch_eager")]
        print(f"| {NAMES.get(m, m)} | {b} | {n} | " + " | ".join(loss) + " |")


def speed_tables(speed):
    targets = []
    hg = RUNTIMES[1:]
    for t in sorted({k[0] for k in speed}):
        cells = sorted({(k[1], k[2]) for k in speed if k[0] == t}, key=lambda c: (list(NAMES).index(c[0]), c[1]))
        print(f"\n#### {t} thread{'s' if t > 1 else ''}: training samples/s (best round; x = over PyTorch eager)\n")
        print("| model | batch | " + " | ".join(title for _, title in RUNTIMES) + " |")
        print("|---|---:|" + "---:|" * len(RUNTIMES))
        rows = {}
        for m, b in cells:
            r = {rt: speed.get((t, m, b, rt)) for rt, _ in RUNTIMES}
            rows[(m, b)] = r
            sps = {rt: (j["samples_per_s"] if j else None) for rt, j in r.items()}
            torch = sps["torch_eager"]
            out = [fmt(torch)]
            for rt, _ in hg:
                x = sps[rt] / torch if sps[rt] and torch else None
                out.append(fmt(sps[rt]) + (f" ({x:.2f}x)" if x else ""))
            print(f"| {NAMES.get(m, m)} | {b} | " + " | ".join(out) + " |")
            lazy, lazy10 = sps["hgraph_lazy"], sps["hgraph_lazy_s10"]
            if m in ("mlp", "lenet5") and lazy and torch:
                ok = lazy / torch >= 1.5
                extra = f"; reading the loss every 10 steps {lazy10 / torch:.2f}x ({fmt(lazy10)})" if lazy10 else ""
                targets.append(f"- {'met' if ok else 'MISSED'}: {t}T {NAMES[m]} batch {b}: lazy {lazy / torch:.2f}x "
                               f"PyTorch eager (>= 1.5x): {fmt(lazy)} vs {fmt(torch)} samples/s{extra}")
            rep = r["hgraph_replay"]
            if m == "mlp" and b == 32 and rep and torch:
                x = rep["samples_per_s"] / torch
                targets.append(f"- {'met' if x >= 3 else 'MISSED'}: {t}T MLP batch 32: replayed steps {x:.2f}x "
                               f"PyTorch eager (>= 3x): {fmt(rep['samples_per_s'])} vs {fmt(torch)} samples/s")
                us = rep.get("replay_host_us", 0)
                targets.append(f"- {'met' if 0 < us <= 3 else 'MISSED'}: {t}T MLP batch 32: host time per replayed "
                               f"step {us:.2f} us (<= 3 us; traced lazy step: "
                               f"{fmt(r['hgraph_lazy']['host_cpu_s'] / r['hgraph_lazy']['steps'] * 1e6) if r['hgraph_lazy'] else '-'} us "
                               "of host CPU, waits included)")
        print(f"\nCPU time per step ({t} thread{'s' if t > 1 else ''}; process user + system time of all "
              "threads over the timed steps; in parentheses hgraph's host thread alone, which traces or "
              "dispatches while hpu:0's worker runs the kernels)\n")
        print("| model | batch | " + " | ".join(title for _, title in RUNTIMES) + " |")
        print("|---|---:|" + "---:|" * len(RUNTIMES))
        for (m, b), r in rows.items():
            cpu = [(fmt(j["cpu_s"] / j["steps"] * 1e6) + " us" +
                    (f" ({fmt(j['host_cpu_s'] / j['steps'] * 1e6)})" if "host_cpu_s" in j else "")) if j else "-"
                   for j in r.values()]
            print(f"| {NAMES.get(m, m)} | {b} | " + " | ".join(cpu) + " |")
    return targets


def ddp_table(ddp):
    targets = []
    if not ddp:
        return targets
    print("\n#### DDP: 2 ranks x 1 thread against 2 independent 1-thread processes (samples/s, best round; "
          "lazy: every step traced, replay: replayed steps, the all-reduce in the step's graph)\n")
    print("| model | batch per process | mode | 1 process alone | 2 independent (sum) | overlap of their timed windows "
          "| DDP 2 ranks (sum) | DDP / 2 independent | DDP / 1 process |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for (m, b, mode), rows in sorted(ddp.items(), key=lambda kv: (list(NAMES).index(kv[0][0]), kv[0][1], kv[0][2])):
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
        print(f"| {NAMES.get(m, m)} | {b} | {mode} | {fmt(single)} | {fmt(ind)} | "
              f"{'-' if overlap is None else f'{overlap:.0%}'} | {fmt(ddp_sps)} | "
              f"{'-' if r_ind is None else f'{r_ind:.0%}'} | {fmt(r_one)}x |")
        if r_ind is not None:
            targets.append(f"- {'met' if r_ind >= 0.9 else 'MISSED'}: DDP 2x1T {NAMES.get(m, m)} batch {b}/process, {mode}: "
                           f"{r_ind:.0%} of 2 independent processes (>= 90%); {fmt(ddp_sps)} vs {fmt(ind)} samples/s")
    return targets


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    speed, ddp, check = load(sys.argv[1])
    targets = speed_tables(speed) + ddp_table(ddp)
    check_table(check)
    print("\n### Targets\n")
    print("\n".join(targets) if targets else "(no cells measured)")


if __name__ == "__main__":
    main()
