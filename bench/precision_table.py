#!/usr/bin/python3
"""Tables of bench/run_precision.sh's JSON lines: latency per precision with ratios, and agreement.
    /usr/bin/python3 bench/precision_table.py BUILD/precision.jsonl
Each (runtime, model, batch, threads) keeps its fastest round's median."""
import json
import sys

RUNTIMES = ["hgraph_replay", "hgraph_replay_bf16", "hgraph_replay_int8", "hgraph_replay_int8_static", "ort", "ort_int8"]


def main(path):
    lat, agree = {}, []
    for line in open(path):
        j = json.loads(line)
        if "top1_agreement" in j:
            agree.append(j)
        elif "median_ms" in j:
            k = (j["model"], j["batch"], j["threads"], j["runtime"])
            lat[k] = min(lat.get(k, float("inf")), j["median_ms"])
    print("| model | batch | threads | hgraph FP32 ms | BF16 ms (x FP32) | INT8 ms (x FP32) | INT8 static ms (x FP32) "
          "| ORT FP32 ms | ORT INT8 ms | ORT FP32 / hgraph FP32 | ORT INT8 / hgraph INT8 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    cells = sorted({k[:3] for k in lat}, key=lambda c: (c[2], c[0], c[1]))
    for m, b, t in cells:
        v = {r: lat.get((m, b, t, r)) for r in RUNTIMES}
        f32, bf, i8, i8s, o32, o8 = (v[r] for r in RUNTIMES)

        def ms(x):
            return f"{x:.3f}" if x is not None else "-"

        def ratio(a, c):
            return f"{a / c:.2f}" if a is not None and c else "-"
        print(f"| {m} | {b} | {t} | {ms(f32)} | {ms(bf)} ({ratio(f32, bf)}x) | {ms(i8)} ({ratio(f32, i8)}x) "
              f"| {ms(i8s)} ({ratio(f32, i8s)}x) | {ms(o32)} | {ms(o8)} | {ratio(o32, f32)} | {ratio(o8, i8)} |")
    print()
    print("| model | runtime | precision | samples | top-1 agreement with FP32 | max relative error |")
    print("|---|---|---|---|---|---|")
    for j in agree:
        precision = j["precision"] + (" static" if j.get("calibration") else "")
        print(f"| {j['model']} | {j.get('runtime', 'hgraph')} | {precision} | {j['samples']} | "
              f"{100 * j['top1_agreement']:.1f}% | {j['max_rel_err']:.3g} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
