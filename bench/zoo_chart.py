#!/usr/bin/python3
"""Tables, ratios, targets and the latency chart of the zoo benchmark (bench/run_zoo.sh).

Usage: /usr/bin/python3 bench/zoo_chart.py RESULTS.jsonl META.json [CHART.png]
       /usr/bin/python3 bench/zoo_chart.py --start START.jsonl   (only the start table, from zoo_start.sh)
       /usr/bin/python3 bench/zoo_chart.py --brought RESULTS.jsonl META.json   (bench/run_brought.sh)

Prints markdown: per thread count the latency table (microseconds per forward, median), the
ratios of each peer to hgraph's graph replay (> 1: hgraph faster), ResNet-18's achieved GFLOP/s
against oneDNN's measured f32 matmul peak, the per-node replay overhead, cold capture against a
warm disk cache, and the issue's targets as met / missed. ORT net = ONNX Runtime's time less its
time for the identity model at the same batch (the Node binding's fixed cost per call, measured
before and after the models). A cell measured in several rounds keeps its smallest median.
hgraph replay's max-norm relative error against PyTorch's output is listed per model and batch.
--brought: the models users bring, hgraph replay against ONNX Runtime and PyTorch eager: the
models (input, GFLOP per sample, replay's error), then the latency and ratio tables.
"""
import json
import statistics
import sys

RUNTIMES = [("hgraph_replay", "hgraph replay"), ("hgraph_replay_zoo", "replay (zoo pkg)"),
            ("hgraph_eager", "hgraph eager"), ("hgraph_lazy", "hgraph lazy"), ("pytorch", "PyTorch"),
            ("torchscript", "TorchScript"), ("ort", "ORT"), ("ort_net", "ORT net")]
MODELS = ["mlp", "lenet5", "resnet18", "bert", "identity"]
NAMES = {"mlp": "MLP 64-64-10", "lenet5": "LeNet-5", "resnet18": "ResNet-18 224", "bert": "BERT enc s128",
         "identity": "identity"}
PEERS = [("hgraph_replay_zoo", "replay zoo"), ("hgraph_eager", "eager"), ("hgraph_lazy", "lazy"),
         ("pytorch", "PyTorch"), ("torchscript", "TorchScript"), ("ort", "ORT"), ("ort_net", "ORT net")]
# The models users bring (bench/run_brought.sh): model -> name, and its runtimes and peers.
BROUGHT_NAMES = {"resnet50": "ResNet-50 224", "mobilenet_v2": "MobileNetV2 224", "mobilenet_v3_large": "MobileNetV3-L 224",
                 "efficientnet_b0": "EfficientNet-B0 224", "vit_b_16": "ViT-B/16 224", "bert_base": "BERT-base s128", "bert_base_hf": "BERT-base (HF) s128",
                 "lstm": "LSTM 2x256, 64 steps"}
BROUGHT_RUNTIMES = [("hgraph_replay", "hgraph replay"), ("ort", "ORT"), ("pytorch", "PyTorch")]
BROUGHT_PEERS = [("ort", "ORT"), ("pytorch", "PyTorch")]


def fmt_us(us):
    if us is None:
        return "-"
    return f"{us:,.0f}" if us >= 100 else f"{us:.3g}"


def load(path):
    """(latency {(threads, runtime, model, batch): µs}, matmul peak {threads: {size: GFLOP/s}}, the
    chain's line, the start lines, replay's error {(runtime, model, batch): largest max_rel_err})."""
    lat, peak, chain, start, err = {}, {}, None, [], {}
    for line in open(path):
        j = json.loads(line)
        r = j["runtime"]
        if "max_rel_err" in j:  # null: a non-finite output
            e = j["max_rel_err"] if j["max_rel_err"] is not None else float("inf")
            err[(r, j["model"], j["batch"])] = max(e, err.get((r, j["model"], j["batch"]), 0))
        if r == "onednn_matmul":
            sizes = peak.setdefault(j["threads"], {})
            sizes[j["size"]] = max(sizes.get(j["size"], 0), j["gflops"])
        elif r == "hgraph_start":
            start.append(j)
        elif j.get("model") == "chain":
            chain = j
        elif "error" in j:
            print(f"- {r} failed on {j['model']} batch {j['batch']} ({j['threads']}T): {j['error']}")
        else:  # a cell measured more than once (rounds; ORT's identity) keeps its smallest median
            lat.setdefault((j["threads"], r, j["model"], j["batch"]), []).append(j["median_ms"] * 1e3)
    lat = {k: min(v) for k, v in lat.items()}
    for (t, r, m, b), us in list(lat.items()):
        if r == "ort" and (t, "ort", "identity", b) in lat:
            lat[(t, "ort_net", m, b)] = us - lat[(t, "ort", "identity", b)]
    return lat, peak, chain, start, err


def ratio(a, b):
    return a / b if a is not None and b else None


def latency_tables(lat, threads, names=NAMES, runtimes=RUNTIMES, peers=PEERS):
    """Per thread count: the median of each (model, batch, runtime) and each peer's ratio to replay."""
    batches = sorted({k[3] for k in lat})
    for t in threads:
        print(f"\n#### {t} thread{'s' if t > 1 else ''}: microseconds per forward (median)\n")
        print("| model | batch | " + " | ".join(n for _, n in runtimes) + " |")
        print("|---|---:|" + "---:|" * len(runtimes))
        for m in names:
            for b in batches:
                cells = [fmt_us(lat.get((t, r, m, b))) for r, _ in runtimes]
                if set(cells) == {"-"}:
                    continue
                print(f"| {names[m]} | {b} | " + " | ".join(cells) + " |")
        print(f"\nRatios at {t} thread{'s' if t > 1 else ''}: peer time / hgraph replay time (> 1: replay faster)\n")
        print("| model | batch | " + " | ".join(n for _, n in peers) + " |")
        print("|---|---:|" + "---:|" * len(peers))
        for m in names:
            for b in batches:
                base = lat.get((t, "hgraph_replay", m, b))
                if base is None:
                    continue
                cells = [ratio(lat.get((t, r, m, b)), base) for r, _ in peers]
                print(f"| {names[m]} | {b} | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")


def error_table(err, names, meta):
    """hgraph replay's max-norm relative error against PyTorch's output, per model and batch (the
    largest over thread counts and rounds), with the model's input and GFLOP per sample."""
    if not err:
        return
    batches = sorted({b for _, _, b in err})
    runtimes = [r for r in ("hgraph_replay", "hgraph_replay_zoo") if any(k[0] == r for k in err)]
    print("\nModels: input sample shape, GFLOP per sample (2 x multiply-adds), and hgraph replay's max-norm "
          "relative error against PyTorch's output (max|replay - PyTorch| / max|PyTorch|)\n")
    cols = [f"{'zoo pkg ' if r.endswith('zoo') else ''}error b{b}" for r in runtimes for b in batches]
    print("| model | input | GFLOP | " + " | ".join(cols) + " |")
    print("|---|---|---:|" + "---:|" * len(cols))
    for m in names:
        cells = [err.get((r, m, b)) for r in runtimes for b in batches]
        if m not in meta or all(c is None for c in cells):
            continue
        print(f"| {names[m]} | {meta[m]['shape']} | {meta[m]['flops'] / 1e9:.3g} | " +
              " | ".join("-" if c is None else f"{c:.1e}" for c in cells) + " |")


def best_peak(peak, t):
    return max(peak[t].values()) if t in peak else None


def resnet_table(lat, peak, meta, threads):
    flops = meta["resnet18"]["flops"]
    print(f"\nResNet-18 at 224x224: {flops / 1e9:.3f} GFLOP per image (2 x conv and fc multiply-adds); "
          "achieved GFLOP/s and % of the peak (oneDNN f32 matmul, best of the sizes measured)\n")
    print("| threads | peak GFLOP/s (matmul n: GFLOP/s) | batch | " + " | ".join(n for r, n in RUNTIMES if r != "ort_net")
          + " | FP32 limit µs | replay / limit |")
    print("|---:|---|---:|" + "---:|" * (len(RUNTIMES) - 1) + "---:|---:|")
    for t in threads:
        p = best_peak(peak, t)
        sizes = ", ".join(f"{n}: {g:.0f}" for n, g in sorted(peak.get(t, {}).items()))
        for b in sorted({k[3] for k in lat if k[2] == "resnet18"}):
            cells = []
            for r, _ in RUNTIMES:
                if r == "ort_net":
                    continue
                us = lat.get((t, r, "resnet18", b))
                cells.append("-" if us is None else f"{flops * b / us / 1e3:.0f} ({100 * flops * b / us / 1e3 / p:.0f}%)")
            limit = flops * b / p / 1e3
            replay = lat.get((t, "hgraph_replay", "resnet18", b))
            print(f"| {t} | {p:.0f} ({sizes}) | {b} | " + " | ".join(cells) +
                  f" | {limit:,.0f} | {ratio(replay, limit) or 0:.3f} |")


def start_table(start):
    if not start:
        print("\nCold capture vs warm disk cache: not measured")
        return {}
    print("\nStart in a fresh process (batch 1, 1 thread; median of 3), ms: load = Predictor::load (ONNX import "
          "or package), capture = capture_all (trace, compile, kernel preparation, first run), compile = the "
          "capture's graph-cache lookup + compile; cold = empty HG_GRAPH_CACHE directory, warm = the entry the "
          "cold run wrote\n")
    print("| model | cold load | cold capture | cold compile | warm load | warm capture | warm compile | warm disk hits | "
          "warm/cold compile | warm/cold capture | warm/cold load+capture |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    out = {}
    keys = ("load_ms", "capture_ms", "compile_ms", "total_ms")
    for model in dict.fromkeys(j["model"] for j in start):
        row, hits = {}, 0
        for cache in ("cold", "warm"):
            js = [j for j in start if j["model"] == model and j["cache"] == cache]
            row[cache] = {k: statistics.median(j.get(k, 0) for j in js) for k in keys}
            if cache == "warm":
                hits = f"{sum(bool(j.get('disk_hit')) for j in js)}/{len(js)}"
        c, w = row["cold"], row["warm"]
        parts = model.rstrip("/").split("/")
        name = "/".join(parts[-2:]) if parts[-1] == "zoo" else parts[-1]
        comp = w["compile_ms"] / c["compile_ms"] if c["compile_ms"] else float("nan")
        out[name] = (w["capture_ms"] / c["capture_ms"], w["total_ms"] / c["total_ms"], comp)
        print(f"| {name} | {c['load_ms']:.1f} | {c['capture_ms']:.1f} | {c['compile_ms']:.1f} | {w['load_ms']:.1f} | "
              f"{w['capture_ms']:.1f} | {w['compile_ms']:.1f} | {hits} | {comp:.3f} | {out[name][0]:.3f} | "
              f"{out[name][1]:.3f} |")
    return out


def targets(lat, peak, meta, chain, starts, threads):
    print("\nTargets (hgraph replay: the faster of the Predictor over the ONNX file ONNX Runtime runs and "
          "over the zoo package with the same weights; both shown)\n")

    def line(ok, text):
        print(f"- {'met' if ok else 'MISSED'}: {text}")

    if chain:
        v = chain["per_node_us"]
        line(v <= 0.5, f"per-node replay overhead {v:.3f} µs ≤ 0.5 µs ({chain['steps']} steps; "
                        f"{chain['per_node_net_us']:.3f} µs net of a 1-op graph's {chain['one_op_us']:.2f} µs)")
    for t in threads:
        def best(m):
            onnx, zoo = lat.get((t, "hgraph_replay", m, 1)), lat.get((t, "hgraph_replay_zoo", m, 1))
            us = min(x for x in (onnx, zoo) if x) if onnx or zoo else None
            return us, f"replay {fmt_us(us)} µs (ONNX {fmt_us(onnx)}, zoo {fmt_us(zoo)})"

        def peer(r, m):
            return lat.get((t, r, m, 1))

        rep, txt = best("mlp")
        if rep:
            pt, on, raw = (ratio(peer(r, "mlp"), rep) for r in ("pytorch", "ort_net", "ort"))
            line(pt is not None and pt >= 3, f"{t}T MLP batch 1 vs PyTorch eager: {pt:.2f}x ≥ 3x; {txt}, "
                                             f"PyTorch {fmt_us(peer('pytorch', 'mlp'))} µs")
            line(on is not None and on >= 1.5, f"{t}T MLP batch 1 vs ORT net: {on:.2f}x ≥ 1.5x (raw {raw:.2f}x); "
                                               f"ORT {fmt_us(peer('ort', 'mlp'))} µs, net {fmt_us(peer('ort_net', 'mlp'))} µs")
        rep, txt = best("bert")
        if rep:
            raw, net = ratio(peer("ort", "bert"), rep), ratio(peer("ort_net", "bert"), rep)
            line(net is not None and net >= 1.3, f"{t}T BERT batch 1 vs ORT net: {net:.2f}x ≥ 1.3x (raw {raw:.2f}x); "
                                                 f"{txt}, ORT {fmt_us(peer('ort', 'bert'))} µs")
        rep, txt = best("resnet18")
        if rep and t in peak:
            limit = meta["resnet18"]["flops"] / best_peak(peak, t) / 1e3
            line(rep <= 1.05 * limit, f"{t}T ResNet-18 batch 1 within 5% of the FP32 limit {limit:,.0f} µs: "
                                      f"{rep / limit:.3f}x the limit; {txt}")
            o = ratio(peer("ort_net", "resnet18"), rep)
            line(o is not None and o > 1, f"{t}T ResNet-18 batch 1 ahead of ORT net: {o:.2f}x; "
                                          f"ORT {fmt_us(peer('ort', 'resnet18'))} µs")
    for name, (cap, total, comp) in starts.items():
        line(cap <= 0.1, f"warm-cache start of {name}: capture {100 * cap:.1f}% of a cold capture ≤ 10% "
                         f"(the compile alone {100 * comp:.1f}%; with the model load {100 * total:.1f}%)")


def chart(lat, threads, path):
    """One panel per (thread count, model): bars per runtime at each batch, log scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.patches
    import matplotlib.pyplot as plt
    batches = sorted({k[3] for k in lat})
    series = [(r, n) for r, n in RUNTIMES if r != "ort_net"]
    colors = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(len(threads), len(MODELS), figsize=(3.4 * len(MODELS), 3.6 * len(threads)),
                             squeeze=False)
    width = 0.8 / len(series)
    for row, t in enumerate(threads):
        for col, m in enumerate(MODELS):
            ax = axes[row, col]
            low = []
            for k, (r, name) in enumerate(series):
                xs = [i + (k - (len(series) - 1) / 2) * width for i, b in enumerate(batches) if lat.get((t, r, m, b))]
                ys = [lat[(t, r, m, b)] for b in batches if lat.get((t, r, m, b))]
                ax.bar(xs, ys, width, label=name, color=colors[k])
                low += ys
            ax.set_yscale("log")
            if low:
                ax.set_ylim(bottom=min(low) / 2)
            ax.set_xticks(range(len(batches)))
            ax.set_xticklabels([f"batch {b}" for b in batches], fontsize=8)
            ax.set_title(f"{NAMES[m]}, {t} thread{'s' if t > 1 else ''}", fontsize=9)
            ax.grid(axis="y", which="major", alpha=0.3)
            ax.tick_params(axis="y", labelsize=7)
            if col == 0:
                ax.set_ylabel("µs per forward (log)")
    handles = [matplotlib.patches.Patch(color=colors[k]) for k in range(len(series))]
    fig.legend(handles, [n for _, n in series], loc="lower center", ncol=len(series), fontsize=9)
    fig.suptitle("hgraph zoo benchmark: latency per forward, median (lower is better)")
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    fig.savefig(path, dpi=100)
    print(f"\nchart: {path}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--start":  # bench/zoo_start.sh's lines only
        start_table(load(sys.argv[2])[3])
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--brought":
        lat, _, _, _, err = load(sys.argv[2])
        error_table(err, BROUGHT_NAMES, json.load(open(sys.argv[3])))
        latency_tables(lat, sorted({k[0] for k in lat}), BROUGHT_NAMES, BROUGHT_RUNTIMES, BROUGHT_PEERS)
        return
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    lat, peak, chain, start, err = load(sys.argv[1])
    meta = json.load(open(sys.argv[2]))
    threads = sorted({k[0] for k in lat})
    error_table(err, NAMES, meta)
    latency_tables(lat, threads)
    if any(k[2] == "resnet18" for k in lat) and peak:
        resnet_table(lat, peak, meta, threads)
    if chain:
        print(f"\nPer-node replay overhead: an HPU graph of {chain['nodes']} scale ops on one element "
              f"({chain['steps']} steps after the passes, fusion off) replays in {chain['median_ms'] * 1e3:.1f} µs: "
              f"{chain['per_node_us']:.3f} µs per node; a 1-op graph takes {chain['one_op_us']:.2f} µs, "
              f"so {chain['per_node_net_us']:.3f} µs per node net of the fixed replay cost")
    starts = start_table(start)
    targets(lat, peak, meta, chain, starts, threads)
    if len(sys.argv) == 4:
        chart(lat, threads, sys.argv[3])


if __name__ == "__main__":
    main()
