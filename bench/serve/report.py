#!/usr/bin/python3
"""The serving benchmark's report (bench/serve/run_serve.sh runs it at the end).

    /usr/bin/python3 bench/serve/report.py OUT

OUT is run_serve.sh's output folder: OUT/models.json, OUT/runs/meta.json and per (server, model,
concurrency) cell OUT/runs/SERVER__MODEL__cC.wrk (wrk's output with the WRK_JSON line of
bench/serve/post.lua), .load (the 1-minute load average before the cell) and, for hgraph,
.before.prom / .after.prom (GET /metrics around the cell). Writes OUT/results.jsonl (one JSON
object per cell) and prints markdown: the client-side table (req/s, p50, p99, p99.9, errors) with
the peer ratios, hgraph's server-side split, and the issue's targets as met / missed.

Server-side split: the cell's difference of each histogram (hg_parse_duration_us,
hg_queue_duration_us, hg_compute_duration_us, hg_respond_duration_us, hg_request_duration_us;
label model = the cell's model, summed over versions): the mean (sum / count) and the p50
estimated from the bucket counts, linear within the bucket that holds it (the buckets are 10, 25,
50, 100, 250, ... us, so a p50 is only as fine as its bucket; "<10" when it is in the first);
hg_batch_size gives the mean samples per model run. The overhead target counts as met when the
upper bound of the bucket holding the identity model's p50 is at most 50 us.
"""
import glob
import json
import math
import os
import re
import sys

SPLIT = ["parse", "queue", "compute", "respond", "request"]
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prom(path):
    """[(name, {label: value}, value)] of a Prometheus text file; [] when missing or not metrics."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            m = SAMPLE.match(line)
            if m and not line.startswith("#"):
                try:
                    out.append((m.group(1), dict(LABEL.findall(m.group(3) or "")), float(m.group(4))))
                except ValueError:
                    pass
    return out


def histogram(samples, family, model):
    """{"sum", "count", "buckets": [(le, cumulative count)]} of family for model, or None."""
    total = {"sum": 0.0, "count": 0.0, "buckets": {}}
    found = False
    for name, labels, value in samples:
        if labels.get("model") != model or not name.startswith(family + "_"):
            continue
        kind = name[len(family) + 1:]
        found = True
        if kind == "bucket":
            le = math.inf if labels["le"] == "+Inf" else float(labels["le"])
            total["buckets"][le] = total["buckets"].get(le, 0.0) + value
        elif kind in ("sum", "count"):
            total[kind] += value
    return total if found else None


def diff(before, after):
    if after is None:
        return None
    if before is None:
        before = {"sum": 0.0, "count": 0.0, "buckets": {}}
    return {"sum": after["sum"] - before["sum"], "count": after["count"] - before["count"],
            "buckets": sorted((le, c - before["buckets"].get(le, 0.0)) for le, c in after["buckets"].items())}


def quantile(h, q):
    """(estimate, bucket) of a differenced histogram's q-quantile: linear within the bucket that
    holds it, whose (lower, upper) bounds come along."""
    if not h or h["count"] <= 0:
        return None, None
    rank, lower, below = q * h["count"], 0.0, 0.0
    for le, cum in h["buckets"]:
        if cum >= rank:
            if math.isinf(le):
                return lower, (lower, le)
            return lower + (le - lower) * (rank - below) / max(cum - below, 1e-9), (lower, le)
        lower, below = le, cum
    return lower, (lower, math.inf)


def load_cell(path):
    base = path[:-len(".wrk")]
    server, model, c = os.path.basename(base).split("__")
    cell = {"server": server, "model": model, "concurrency": int(c[1:])}
    with open(path) as f:
        lines = [ln for ln in f if ln.startswith("WRK_JSON ")]
    if not lines:
        cell["error"] = "no WRK_JSON line in " + path
        return cell
    cell.update(json.loads(lines[-1][len("WRK_JSON "):]))
    cell["errors"] = cell["non200"] + cell["connect_errors"] + cell["read_errors"] + cell["write_errors"] + \
        cell["timeouts"]
    if os.path.exists(base + ".load"):
        cell["load"] = float(open(base + ".load").read().split()[0])
    if os.path.exists(base + ".cpu") and cell.get("requests"):  # the server's CPU seconds around the cell
        before, after = map(float, open(base + ".cpu").read().split())
        cell["cpu_us_per_request"] = (after - before) * 1e6 / cell["requests"]
    before, after = parse_prom(base + ".before.prom"), parse_prom(base + ".after.prom")
    for part in SPLIT + ["batch"]:
        family = "hg_batch_size" if part == "batch" else f"hg_{part}_duration_us"
        h = diff(histogram(before, family, model), histogram(after, family, model))
        if h and h["count"] > 0:
            cell[part + "_mean"] = h["sum"] / h["count"]
            cell[part + "_p50"], cell[part + "_p50_bucket"] = quantile(h, 0.5)
            cell[part + "_count"] = h["count"]
    return cell


def num(v, digits=3):
    """Three significant digits, thousands separated; '-' for none."""
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{max(0, digits - 1 - int(math.floor(math.log10(abs(v)))) if v else 0)}f}"


def us(v):
    """Microseconds as us / ms."""
    if v is None:
        return "-"
    return f"{num(v / 1000)} ms" if v >= 10000 else f"{num(v)} us"


def p50_text(cell, part):
    """A histogram p50 as text: '<B' when it lies in the first bucket (no finer estimate)."""
    bucket = cell.get(part + "_p50_bucket")
    if bucket and bucket[0] == 0:
        return f"<{bucket[1]:g}"
    return num(cell.get(part + "_p50"))


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    meta = json.load(open(os.path.join(out, "runs", "meta.json")))
    cells = [load_cell(p) for p in sorted(glob.glob(os.path.join(out, "runs", "*.wrk")))]
    with open(os.path.join(out, "results.jsonl.tmp"), "w") as f:
        for c in cells:
            f.write(json.dumps(c) + "\n")
    os.replace(os.path.join(out, "results.jsonl.tmp"), os.path.join(out, "results.jsonl"))
    by = {(c["server"], c["model"], c["concurrency"]): c for c in cells if "error" not in c}
    order = meta["models"].split()
    conc = [int(c) for c in meta["concurrency"].split()]

    print(f"Run {meta['date']} at commit {meta['commit']}: `{meta['command']}`; {meta['cores']} cores "
          f"({meta['cpu']}), load {meta.get('load_before', '?')} before the run and {meta['load_start']} once both "
          f"servers were ready; compute threads {meta['threads']} per "
          f"instance, {meta['instances']} instances per model (uvicorn workers), wrk threads "
          f"{meta['wrk_threads']}, {meta['seconds']} s per cell.")
    loads = [c["load"] for c in cells if "load" in c]
    if loads:
        print(f"1-minute load average before the cells: {min(loads):.2f} to {max(loads):.2f} (wrk and the "
              f"servers' own load included).")
    print()
    for c in cells:
        if "error" in c:
            print(f"- {c['server']} {c['model']} c={c['concurrency']}: {c['error']}")

    print("#### Client side (wrk): requests per second and latency\n")
    print("| model | conc | hgraph req/s | p50 | p99 | p99.9 | p99/p50 | errors | CPU/req | peer req/s | p50 | p99 "
          "| p99.9 | errors | CPU/req | req/s ratio | p50 ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in order:
        for k in conc:
            h, p = by.get(("hgraph", m, k)), by.get(("peer", m, k))
            if not h and not p:
                continue
            hs = [num(h["rps"]), us(h["p50_us"]), us(h["p99_us"]), us(h["p999_us"]),
                  ratio(h["p99_us"], h["p50_us"]), str(h["errors"]), us(h.get("cpu_us_per_request"))] if h else ["-"] * 7
            ps = [num(p["rps"]), us(p["p50_us"]), us(p["p99_us"]), us(p["p999_us"]), str(p["errors"]),
                  us(p.get("cpu_us_per_request"))] if p else ["-"] * 6
            rs = [ratio(h["rps"], p["rps"]), ratio(p["p50_us"], h["p50_us"])] if h and p else ["-", "-"]
            print(f"| {m} | {k} | " + " | ".join(hs + ps + rs) + " |")
    print("\nratios: hgraph req/s / peer req/s and peer p50 / hgraph p50 (> 1: hgraph better). CPU/req: the "
          "server's CPU time (every thread and worker process, from /proc) over the cell, per request answered.\n")

    print("#### hgraph server side (GET /metrics): p50 (mean) per request, microseconds\n")
    print("| model | conc | parse | queue | compute | respond | request (end to end) | wrk p50 | samples/run |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in order:
        for k in conc:
            h = by.get(("hgraph", m, k))
            if not h:
                continue
            parts = [f"{p50_text(h, s)} ({num(h.get(s + '_mean'))})" if s + "_mean" in h else "-" for s in SPLIT]
            print(f"| {m} | {k} | " + " | ".join(parts) + f" | {num(h['p50_us'])} | {num(h.get('batch_mean'))} |")

    print("\n#### Targets\n")
    ident = [by.get(("hgraph", "identity", k)) for k in conc]
    ident = [c for c in ident if c]
    if ident and any("request_p50" in c for c in ident):
        worst = max(c["request_p50_bucket"][1] for c in ident if "request_p50" in c)
        print(f"- server-side overhead p50 <= 50 us on the identity model: "
              f"{'met' if worst <= 50 else 'missed'}: hg_request_duration_us p50 "
              + ", ".join(f"{p50_text(c, 'request')} us (mean {num(c.get('request_mean'))}) at c={c['concurrency']}"
                          for c in ident if "request_p50" in c))
    else:
        print("- server-side overhead on the identity model: not measured (no identity cell with metrics)")
    high = max(conc)
    bad = []
    for m in order:
        h = by.get(("hgraph", m, high))
        if h and (h["errors"] or h["p99_us"] > 5 * h["p50_us"]):
            bad.append(f"{m} (p99/p50 {ratio(h['p99_us'], h['p50_us'])}, {h['errors']} errors)")
    print(f"- no errors and p99 <= 5x p50 at concurrency {high}: " + ("met for every model" if not bad else
                                                                    "missed for " + ", ".join(bad)))
    mlp = [(k, by.get(("hgraph", "mlp", k)), by.get(("peer", "mlp", k))) for k in conc]
    mlp = [(k, h, p) for k, h, p in mlp if h and p]
    if mlp:
        best = max(h["rps"] for _, h, _ in mlp) / max(p["rps"] for _, _, p in mlp)
        print(f"- >= 10x the FastAPI + PyTorch throughput on the MLP: {'met' if best >= 10 else 'missed'}: "
              f"best hgraph / best peer req/s {best:.1f}x; per concurrency "
              + ", ".join(f"{h['rps'] / p['rps']:.1f}x at c={k}" for k, h, p in mlp))
    cpu = [(k, h) for k, h in ((k, by.get(("hgraph", "mlp", k))) for k in conc) if h and "cpu_us_per_request" in h]
    if cpu:
        low = min(h["cpu_us_per_request"] for _, h in cpu)
        print(f"- <= 15 us of server CPU per request on the MLP: {'met' if low <= 15 else 'missed'}: "
              + ", ".join(f"{num(h['cpu_us_per_request'])} us at c={k}" for k, h in cpu))
    for name, what in (("bert", "128 token ids"), ("bert_s16", "16 token ids")):
        b, b1 = by.get(("hgraph", name, 16)), by.get(("hgraph", name + "_b1", 16))
        if b and b1:
            r = b["rps"] / b1["rps"]
            print(f"- dynamic batching >= 2x the BERT encoder's throughput at concurrency 16 over max_batch_size 1 "
                  f"({what}): {'met' if r >= 2 else 'missed'}: {num(b['rps'])} vs {num(b1['rps'])} req/s = "
                  f"{r:.2f}x (mean samples per run {num(b.get('batch_mean'))} vs {num(b1.get('batch_mean'))})")

if __name__ == "__main__":
    main()
