#!/usr/bin/python3
"""Helpers of the soak test (bench/soak/run_soak.sh): request bodies, the RSS/fd sampler, the report.

    /usr/bin/python3 bench/soak/soak.py bodies DIR
    /usr/bin/python3 bench/soak/soak.py sample PID T0 INTERVAL CSV
    /usr/bin/python3 bench/soak/soak.py report OUT DURATION WARMUP RSS_PCT FD_SLACK RELOAD_EVERY SERVER_STATE

bodies: writes DIR/<kind>.json and DIR/requests.txt, one "KIND GOOD|BAD PATH FILE" line per request
  (bench/soak/soak.lua sends them, run_soak.sh probes each once before the run). Good: digits_a
  (1 row), digits_b (3 rows), echo (2 rows). Bad: truncated JSON, a wrong datatype, an unknown
  input name, `data` nested 1000 levels deep, an unknown model, a wrong shape for echo.
sample: appends "time_s,rss_kb,fds" to CSV every INTERVAL s (time since the epoch time T0) while PID
  lives: VmRSS of /proc/PID/status and the entries of /proc/PID/fd.
report: reads OUT/samples.csv, OUT/wrk.txt (the SOAK_JSON line of soak.lua), OUT/reloads.csv,
  writes OUT/soak.png and OUT/summary.txt, prints the summary, exits 1 when a rule fails
  (run_soak.sh's header lists them). RELOAD_EVERY: the reload period (one reload is due at every
  multiple up to DURATION - 5 s). SERVER_STATE: "ok", or why the server is not.
"""
import json
import os
import sys
import time

DIGITS = [float((i * 7 + 3) % 17) for i in range(64)]


def body(name, datatype, shape, data):
    return json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": shape, "data": data}]})


def bodies(folder):
    os.makedirs(folder, exist_ok=True)
    digits = lambda rows: body("input", "FP32", [rows, 64], DIGITS * rows)  # noqa: E731
    echo = body("INPUT0", "FP32", [2, 16], [i / 8 for i in range(32)])
    deep = '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": ' + \
        "[" * 1000 + "1.0" + "]" * 1000 + "}]}"
    requests = [  # kind, good, model, body
        ("digits_a", "GOOD", "digits_a", digits(1)),
        ("digits_b", "GOOD", "digits_b", digits(3)),
        ("echo", "GOOD", "echo", echo),
        ("truncated_json", "BAD", "digits_a", digits(1)[:200]),
        ("wrong_datatype", "BAD", "digits_b", body("input", "INT32", [1, 64], [int(v) for v in DIGITS])),
        ("unknown_input", "BAD", "digits_a", body("nope", "FP32", [1, 64], DIGITS)),
        ("deep_nesting", "BAD", "digits_b", deep),
        ("unknown_model", "BAD", "no_such_model", digits(1)),
        ("echo_wrong_shape", "BAD", "echo", body("INPUT0", "FP32", [1, 17], [0.5] * 17)),
    ]
    with open(os.path.join(folder, "requests.txt"), "w") as index:
        for kind, good, model, text in requests:
            path = os.path.join(folder, kind + ".json")
            with open(path, "w") as f:
                f.write(text)
            index.write(f"{kind} {good} /v2/models/{model}/infer {os.path.abspath(path)}\n")


def sample(pid, t0, interval, csv):
    with open(csv, "a") as out:
        k = 0
        while True:
            try:
                with open(f"/proc/{pid}/status") as f:
                    rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, StopIteration):
                return  # the process is gone
            out.write(f"{time.time() - t0:.1f},{rss},{fds}\n")
            out.flush()
            k += 1
            time.sleep(max(0.0, t0 + k * interval - time.time()))


def read_csv(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.strip().split(",")
                if parts and parts[0] and parts[0][0].isdigit():
                    rows.append(parts)
    return rows


def report(out, duration, warmup, rss_pct, fd_slack, reload_every, server_state):
    samples = [(float(t), int(r), int(n)) for t, r, n in read_csv(os.path.join(out, "samples.csv"))]
    reloads = read_csv(os.path.join(out, "reloads.csv"))  # time_s, model, status, seconds
    wrk = None
    wrk_path = os.path.join(out, "wrk.txt")
    if os.path.exists(wrk_path):
        for line in open(wrk_path):
            if line.startswith("SOAK_JSON "):
                wrk = json.loads(line[len("SOAK_JSON "):])
    failures, lines = [], []
    if server_state != "ok":
        failures.append(f"server: {server_state}")

    # Memory and descriptors: the baseline is the first sample at or after the warm-up; RSS fails
    # when the largest sample of the last third of the run exceeds it by more than RSS_PCT %, fds
    # when the last sample exceeds it by more than FD_SLACK.
    after = [s for s in samples if s[0] >= warmup - 0.5]
    last_third = [s for s in samples if s[0] >= duration * 2 / 3]
    if len(samples) < 2 or not after or not last_third:
        failures.append(f"samples: {len(samples)} samples, too few for the rules (warm-up {warmup} s, run {duration} s)")
    else:
        base = after[0]
        top = max(last_third, key=lambda s: s[1])
        drift = 100.0 * (top[1] - base[1]) / base[1]
        lines.append(f"RSS: start {samples[0][1]} kB, after warm-up (t={base[0]:.0f} s) {base[1]} kB, "
                     f"end {samples[-1][1]} kB, max {max(s[1] for s in samples)} kB; "
                     f"max of the last third {top[1]} kB (t={top[0]:.0f} s, {drift:+.2f}% of the warm-up value)")
        lines.append(f"fds: start {samples[0][2]}, after warm-up {base[2]}, end {samples[-1][2]}, "
                     f"max {max(s[2] for s in samples)}")
        if drift > rss_pct:
            failures.append(f"RSS grew {drift:.2f}% (> {rss_pct}%): {base[1]} kB at t={base[0]:.0f} s -> "
                            f"{top[1]} kB at t={top[0]:.0f} s")
        if samples[-1][2] > base[2] + fd_slack:
            failures.append(f"fds grew: {base[2]} at t={base[0]:.0f} s -> {samples[-1][2]} at "
                            f"t={samples[-1][0]:.0f} s (slack {fd_slack})")

    if wrk is None:
        failures.append("wrk: no SOAK_JSON line in wrk.txt (wrk failed?)")
    else:
        statuses = {int(k): v for k, v in wrk["statuses"].items()}
        answered = sum(statuses.values())
        lines.insert(0, f"requests: {wrk['requests']} in {wrk['seconds']:.0f} s = {wrk['rps']:.1f} req/s "
                        f"({answered} answered; sent {wrk['sent_good']} valid, {wrk['sent_bad']} malformed)")
        lines.insert(1, "statuses: " + ", ".join(f"{k}: {statuses[k]}" for k in sorted(statuses)))
        e = wrk["errors"]
        lines.insert(2, f"socket errors: connect {e['connect']}, read {e['read']}, write {e['write']}, "
                        f"timeout {e['timeout']}; latency p50 {wrk['p50_us'] / 1000:.1f} ms, "
                        f"p99 {wrk['p99_us'] / 1000:.1f} ms, max {wrk['max_us'] / 1000:.1f} ms")
        bad = {k: v for k, v in statuses.items() if not (200 <= k < 300 or 400 <= k < 500 or k == 503)}
        if bad:
            failures.append("statuses other than 2xx/4xx/503: " + ", ".join(
                f"{k} x{v} (first body: {wrk['first_body'].get(str(k), '')!r})" for k, v in sorted(bad.items())))
        if e["connect"] + e["read"] + e["write"]:
            failures.append(f"socket errors: connect {e['connect']}, read {e['read']}, write {e['write']}")
        client_errors = sum(v for k, v in statuses.items() if 400 <= k < 500)
        if client_errors > wrk["sent_bad"]:
            failures.append(f"{client_errors} 4xx answers but only {wrk['sent_bad']} malformed requests sent: "
                            "valid requests were refused (first 4xx bodies: " +
                            str({k: v for k, v in wrk["first_body"].items() if k.startswith("4")}) + ")")
        if answered == 0:
            failures.append("no request answered")

    ok_reloads = sum(1 for r in reloads if r[2] == "200")
    due = int((duration - 5) // reload_every) if reload_every > 0 else 0
    if len(reloads) < due:
        failures.append(f"reloads: {len(reloads)} done, {due} due (every {reload_every:g} s)")
    lines.append(f"reloads: {len(reloads)} (due {due}), {ok_reloads} answered 200" +
                 ("" if not reloads else f", slowest {max(float(r[3]) for r in reloads):.2f} s"))
    for r in reloads:
        if r[2] != "200":
            failures.append(f"reload of {r[1]} at t={float(r[0]):.0f} s answered {r[2]}")
    lines.append("verdict: " + ("PASS" if not failures else "FAIL"))
    lines += ["  " + f for f in failures]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    if samples:
        plot(out, samples, reloads, warmup)
    return 1 if failures else 0


def plot(out, samples, reloads, warmup):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = [s[0] for s in samples]
    fig, (ax_rss, ax_fd) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    ax_rss.plot(t, [s[1] / 1024 for s in samples], marker=".")
    ax_rss.set_ylabel("RSS (MiB)")
    ax_fd.plot(t, [s[2] for s in samples], marker=".", color="tab:orange")
    ax_fd.set_ylabel("open fds")
    ax_fd.set_xlabel("time (s)")
    for ax in (ax_rss, ax_fd):
        ax.axvline(warmup, color="grey", linestyle="--", linewidth=1)
        for r in reloads:
            ax.axvline(float(r[0]), color="tab:green", alpha=0.3, linewidth=1)
        ax.grid(alpha=0.3)
    ax_rss.set_title("hgraph-serve soak: RSS and fds (dashed: end of warm-up; green: reloads)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "soak.png"), dpi=100)


def main():
    cmd, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if cmd == "bodies" and len(args) == 1:
        bodies(args[0])
    elif cmd == "sample" and len(args) == 4:
        sample(int(args[0]), float(args[1]), float(args[2]), args[3])
    elif cmd == "report" and len(args) == 7:
        sys.exit(report(args[0], float(args[1]), float(args[2]), float(args[3]), int(args[4]), float(args[5]), args[6]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
