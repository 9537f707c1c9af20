#!/usr/bin/python3
"""The deploy/ files under test: two hgraph-serve replicas behind nginx, a rolling restart under
load, and no request lost.

Usage: /usr/bin/python3 deploy/rolling_restart_test.py PATH/TO/hgraph-serve
           [--threads N] [--seconds S] [--restarts R] [--direct-seconds S]

On free loopback ports (below the ephemeral range), in a temporary directory: checks deploy/prometheus.yml (YAML, and its
targets are the replicas of deploy/nginx-hgraph.conf) and deploy/hgraph-serve@.service
(`systemd-analyze verify`, when installed); starts two replicas (with deploy/rolling_restart.sh's
--start command) and nginx as the current user (`daemon off;`, deploy/nginx-hgraph.conf with its
ports replaced, pid, logs and temp files in the directory); optionally measures the replicas
directly (--direct-seconds); then N client threads POST digits_mlp inferences through nginx for
--seconds (at least until both replicas have served after the last restart) while
deploy/rolling_restart.sh restarts both replicas R times, evenly spaced. Every answer is counted.
Fails (exit 1, naming what was wrong) unless every request got 200 with the logits the replicas
gave directly before the run, both replicas served through nginx before the first restart and
after the last one, and every process is gone at the end. Exit 77 (a ctest skip) when nginx is
not installed. Prints DEPLOY_JSON {...} with the counts and latencies; the temporary directory
(logs, nginx's access log with the replica that answered each request) is kept on failure.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

from infer_load import INFER, Load, infer_bodies, percentiles, reference_logits
from local_fleet import SHIPPED, Deployment, Failure, get, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
PROMETHEUS = os.path.join(HERE, "prometheus.yml")
UNIT = os.path.join(HERE, "hgraph-serve@.service")
WAIT_BOTH_SECONDS = 30  # until both replicas have served through nginx


def check_prometheus():
    with open(PROMETHEUS) as f:
        doc = yaml.safe_load(f)
    try:
        jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
        job = jobs["hgraph-serve"]
        targets = sorted(t for sc in job["static_configs"] for t in sc["targets"])
    except (KeyError, TypeError) as e:
        raise Failure(f"{PROMETHEUS}: no hgraph-serve job with static_configs targets ({e!r})")
    want = sorted([SHIPPED["replica_a"], SHIPPED["replica_b"]])
    if targets != want or job.get("metrics_path", "/metrics") != "/metrics":
        raise Failure(f"{PROMETHEUS}: targets {targets} (want the nginx replicas {want}) or metrics_path is wrong")
    print(f"prometheus.yml: parsed, targets {targets}")


def check_unit(serve, tmp):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        print("hgraph-serve@.service: not verified, systemd-analyze is not installed")
        return
    with open(UNIT) as f:
        text = f.read()
    if "/usr/local/bin/hgraph-serve" not in text:
        raise Failure(f"{UNIT}: ExecStart does not run /usr/local/bin/hgraph-serve")
    unit = os.path.join(tmp, "hgraph-serve@8001.service")  # an instance, the binary under test
    with open(unit, "w") as f:
        f.write(text.replace("/usr/local/bin/hgraph-serve", serve))
    r = subprocess.run([tool, "verify", unit], capture_output=True, text=True, timeout=60)
    # systemd-analyze also reports on other units of this machine: keep the lines about ours.
    ours = [l for l in (r.stdout + r.stderr).splitlines() if "hgraph-serve@8001" in l and "Failed to parse system call" not in l]
    if r.returncode != 0 or ours:
        raise Failure(f"systemd-analyze verify {UNIT} failed (exit {r.returncode}): " + "\n".join(ours))
    print("hgraph-serve@.service: systemd-analyze verify passed")


def check_metrics(d):
    """Each replica's /metrics (the Prometheus targets) has the inference counter; nginx's answers 404."""
    for port in d.replicas:
        status, body = get(port, "/metrics")
        if status != 200 or b"hg_inference_request_success_total" not in body:
            raise Failure(f"the replica on port {port}: /metrics answered {status} without hg_inference_request_success_total")
    if get(d.ports["nginx"], "/metrics")[0] != 404:
        raise Failure("nginx should answer 404 to /metrics (it is per replica)")


def replica_windows(access_log, replicas, before, after):
    """Inferences answered 200 per replica before `before` and after `after` (Unix seconds), and retried ones."""
    seen = {"before": {p: 0 for p in replicas}, "after": {p: 0 for p in replicas}}
    retried = 0
    with open(access_log) as f:
        for line in f:
            msec, status, rest = line.split(" ", 2)
            if INFER not in rest:
                continue
            tried = rest.split('"')[1].split(", ")
            retried += len(tried) > 1
            if status != "200":
                continue
            port = int(tried[-1].rsplit(":", 1)[1])
            window = "before" if float(msec) < before else "after" if float(msec) > after else None
            if window and port in replicas:
                seen[window][port] += 1
    return seen, retried


def run(args):
    if shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"):
        print("SKIP: nginx is not installed (scripts/setup.sh --with-python installs nginx-light)")
        return 77
    check_prometheus()
    tmp = tempfile.mkdtemp(prefix="hg-deploy-")
    check_unit(os.path.abspath(args.serve), tmp)
    d = Deployment(os.path.abspath(args.serve), tmp)
    result = {"threads": args.threads, "restarts": args.restarts}
    try:
        d.start()
        print(f"replicas on ports {d.replicas}, nginx on {d.ports['nginx']}, files in {tmp}")
        bodies = infer_bodies()
        ref = reference_logits(d.replicas, bodies)
        if args.direct_seconds > 0:
            with Load(d.replicas, bodies, ref, args.threads) as direct:
                time.sleep(args.direct_seconds)
            if direct.failures:
                raise Failure(f"{len(direct.failures)} direct requests failed, the first: {direct.failures[0]}")
            result["direct"] = {"requests": direct.count(), **percentiles(direct.latencies)}
        with Load([d.ports["nginx"]], bodies, ref, args.threads) as load:
            t0 = time.monotonic()
            wait_for("both replicas to serve through nginx before the restart", WAIT_BOTH_SECONDS,
                     lambda: time.monotonic() - t0 > 1 and all(replica_windows(d.access_log, d.replicas, time.time(), 0)[0]["before"].values()),
                     interval=0.5)
            durations, windows = [], []
            for k in range(1, args.restarts + 1):
                delay = t0 + k * args.seconds / (args.restarts + 1) - time.monotonic()
                time.sleep(max(0.0, delay))
                print(f"rolling restart {k} of {args.restarts} under load ({load.count()} requests so far)")
                began = time.time()
                durations.append(round(d.rolling_restart(), 2))
                windows.append((began, time.time()))
            last_restart = time.time()
            time.sleep(max(0.0, t0 + args.seconds - time.monotonic()))
            wait_for("both replicas to serve through nginx after the restart", WAIT_BOTH_SECONDS,
                     lambda: time.time() - last_restart > 1 and all(replica_windows(d.access_log, d.replicas, 0, last_restart)[0]["after"].values()),
                     interval=0.5)
            elapsed = time.monotonic() - t0
        seen, retried = replica_windows(d.access_log, d.replicas, windows[0][0], last_restart)
        result["nginx"] = {"requests": load.count(), "ok": load.ok, "errors": len(load.failures),
                           "seconds": round(elapsed, 1), "retried_by_nginx": retried,
                           "served_before": seen["before"], "served_after": seen["after"],
                           **percentiles(load.latencies)}
        result["nginx_outside_restarts"] = percentiles(load.latencies, windows)
        result["restart_seconds"] = durations
        for f in load.failures[:10]:
            print("FAILED REQUEST:", f)
        if load.failures:
            raise Failure(f"{len(load.failures)} of {load.count()} requests through nginx failed during the rolling restart")
        for window, counts in seen.items():
            if not all(counts.values()):
                raise Failure(f"a replica served nothing through nginx {window} the restarts: {counts}")
        check_metrics(d)
    finally:
        left = d.stop()
        print("DEPLOY_JSON " + json.dumps(result))
    if left:
        raise Failure("teardown: " + "; ".join(left))
    shutil.rmtree(tmp)
    print(f"PASS: {result['nginx']['requests']} requests, all 200 with correct logits; both replicas served before and after")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("serve", help="path to hgraph-serve")
    p.add_argument("--threads", type=int, default=2, help="client threads (2)")
    p.add_argument("--seconds", type=float, default=0, help="load through nginx at least this long (0)")
    p.add_argument("--restarts", type=int, default=1, help="rolling restarts, evenly spaced (1)")
    p.add_argument("--direct-seconds", type=float, default=0, help="first, load on the replicas directly (0)")
    args = p.parse_args()
    if args.threads < 1 or args.restarts < 1:
        p.error("--threads and --restarts must be at least 1")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # tear down on these too
        signal.signal(sig, lambda s, f: sys.exit(f"rolling_restart_test: signal {s}: tearing down"))
    try:
        return run(args)
    except (Failure, subprocess.SubprocessError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
