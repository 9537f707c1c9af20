#!/usr/bin/python3
"""The deploy/ files under test: two hgraph-serve replicas behind nginx, a rolling restart under
load, and no request lost.

Usage: /usr/bin/python3 deploy/rolling_restart_test.py PATH/TO/hgraph-serve
           [--threads N] [--seconds S] [--restarts R] [--direct-seconds S]

On free loopback ports, in a temporary directory: checks deploy/prometheus.yml (YAML, and its
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
not installed. The last line is DEPLOY_JSON {...} with the counts and latencies.
"""
import argparse
import ctypes
import http.client
import json
import os
import pwd
import grp
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
NGINX_CONF = os.path.join(HERE, "nginx-hgraph.conf")
PROMETHEUS = os.path.join(HERE, "prometheus.yml")
UNIT = os.path.join(HERE, "hgraph-serve@.service")
RESTART = os.path.join(HERE, "rolling_restart.sh")
SHIPPED = {"replica_a": "127.0.0.1:8001", "replica_b": "127.0.0.1:8002", "nginx": "listen 127.0.0.1:8080;"}
INFER = "/v2/models/digits_mlp/infer"
DRAIN_SECONDS = 10  # the replicas' --drain-timeout
START_SECONDS = 60  # a replica's start-up until ready, nginx's until it accepts
REQUEST_SECONDS = 30
WAIT_BOTH_SECONDS = 30  # until both replicas have served through nginx


class Failure(Exception):
    pass


def wait_for(what, seconds, check, interval=0.1):
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {seconds} s waiting for {what}")
        time.sleep(interval)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path, or (None, error text)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    except OSError as e:
        return None, str(e)


def alive(pid):
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def render_nginx(ports):
    """deploy/nginx-hgraph.conf with its two replicas and its listen address on the given ports."""
    with open(NGINX_CONF) as f:
        text = f.read()
    new = {"replica_a": f"127.0.0.1:{ports['replica_a']}", "replica_b": f"127.0.0.1:{ports['replica_b']}",
           "nginx": f"listen 127.0.0.1:{ports['nginx']};"}
    for key, old in SHIPPED.items():
        if text.count(old) != 1:
            raise Failure(f"{NGINX_CONF}: expected '{old}' once, found it {text.count(old)} times")
        text = text.replace(old, new[key])
    return text


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


class Deployment:
    """Two replicas and nginx in `tmp`; stop() ends every process it started, whatever happened."""

    def __init__(self, serve, tmp):
        self.tmp = tmp
        self.ports = dict(zip(("replica_a", "replica_b", "nginx"), free_ports(3)))
        self.replicas = [self.ports["replica_a"], self.ports["replica_b"]]
        self.pid_file = os.path.join(tmp, "replica-%p.pid")
        q = shlex.quote
        self.start_cmd = (f"OMP_NUM_THREADS=1 nohup {q(serve)} --host 127.0.0.1 --port \"$1\" "
                          f"--drain-timeout {DRAIN_SECONDS} >> {q(tmp)}/replica-\"$1\".log 2>&1 & "
                          f"echo $! > {q(tmp)}/replica-\"$1\".pid")
        self.nginx = None
        self.access_log = os.path.join(tmp, "access.log")

    def replica_pid(self, port):
        try:
            with open(self.pid_file.replace("%p", str(port))) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def start(self):
        for port in self.replicas:
            subprocess.run(["bash", "-c", self.start_cmd, "start", str(port)], check=True, timeout=10)
        for port in self.replicas:
            wait_for(f"the replica on port {port} to answer 200 on /v2/health/ready (log: {self.tmp}/replica-{port}.log)",
                     START_SECONDS, lambda: get(port, "/v2/health/ready")[0] == 200)
        self.start_nginx()

    def start_nginx(self):
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        site = os.path.join(self.tmp, "hgraph.conf")
        with open(site, "w") as f:
            f.write(render_nginx(self.ports))
        t = self.tmp
        user = ""
        if os.geteuid() == 0:  # workers would otherwise run as nobody, who cannot write into tmp
            user = f"user {pwd.getpwuid(0).pw_name} {grp.getgrgid(0).gr_name};"
        conf = os.path.join(t, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""{user}
daemon off;
worker_processes 1;
pid {t}/nginx.pid;
error_log {t}/error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format upstream '$msec $status "$upstream_addr" "$upstream_status" $request_time "$request"';
    access_log {self.access_log} upstream;
    client_body_temp_path {t}/client_body;
    proxy_temp_path {t}/proxy;
    fastcgi_temp_path {t}/fastcgi;
    uwsgi_temp_path {t}/uwsgi;
    scgi_temp_path {t}/scgi;
    include {site};
}}
""")
        subprocess.run([nginx, "-t", "-q", "-p", t, "-c", conf, "-e", f"{t}/error.log"], check=True, timeout=30)
        libc = ctypes.CDLL(None, use_errno=True)
        self.nginx = subprocess.Popen([nginx, "-p", t, "-c", conf, "-e", f"{t}/error.log"],
                                      preexec_fn=lambda: libc.prctl(1, signal.SIGKILL))  # PR_SET_PDEATHSIG
        wait_for(f"nginx to answer /v2/health/ready with 200 on port {self.ports['nginx']} (log: {t}/error.log)",
                 START_SECONDS, lambda: get(self.ports["nginx"], "/v2/health/ready")[0] == 200)

    def rolling_restart(self):
        cmd = [RESTART, "--stop-timeout", str(DRAIN_SECONDS + 10), "--ready-timeout", str(START_SECONDS),
               "--pid-file", self.pid_file, "--start", self.start_cmd] + [str(p) for p in self.replicas]
        t0 = time.monotonic()
        r = subprocess.run(cmd, timeout=2 * (DRAIN_SECONDS + 10 + START_SECONDS + 10))
        if r.returncode != 0:
            raise Failure(f"deploy/rolling_restart.sh exited {r.returncode}")
        return time.monotonic() - t0

    def stop(self):
        """Ends nginx and the replicas (SIGTERM, then SIGKILL after a bounded wait); names leftovers."""
        procs = []
        if self.nginx is not None:
            if self.nginx.poll() is None:
                self.nginx.send_signal(signal.SIGQUIT)  # graceful: finish the requests in flight
            procs.append(("nginx", self.nginx.pid))
        for port in self.replicas:
            pid = self.replica_pid(port)
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGTERM)
                procs.append((f"the replica on port {port}", pid))
        left = []
        for name, pid in procs:
            try:
                wait_for(f"{name} (pid {pid}) to exit", DRAIN_SECONDS + 5,
                         lambda: (self.nginx.poll() is not None) if name == "nginx" else not alive(pid))
            except Failure as e:
                left.append(str(e))
                os.kill(pid, signal.SIGKILL)
        if self.nginx is not None:
            self.nginx.wait(timeout=10)
        for port in self.ports.values():
            if get(port, "/v2/health/live")[0] is not None:
                left.append(f"port {port} still answers after the teardown")
        return left


def infer_bodies():
    return [json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                                    "data": [float((i * (k + 3) + k) % 17) for i in range(64)]}]}).encode()
            for k in range(8)]


def infer(conn, body):
    conn.request("POST", INFER, body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def logits(answer):
    return json.loads(answer)["outputs"][0]["data"]


def close_enough(got, want):
    return len(got) == len(want) and all(abs(g - w) <= 1e-3 * max(1.0, abs(w)) for g, w in zip(got, want))


def reference_logits(ports, bodies):
    """Each body's logits from the first replica directly; the second must agree."""
    ref = []
    for body in bodies:
        answers = []
        for port in ports:
            status, answer = infer(http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_SECONDS), body)
            if status != 200:
                raise Failure(f"the replica on port {port} answered {status} to a direct inference: {answer[:200]!r}")
            answers.append(logits(answer))
        if not close_enough(answers[1], answers[0]):
            raise Failure(f"the two replicas disagree: {answers[0]} vs {answers[1]}")
        ref.append(answers[0])
    return ref


class Load:
    """Client threads POSTing inferences in a loop, each over its own keep-alive connection."""

    def __init__(self, ports, bodies, ref, threads, max_requests=10_000_000):
        self.ports, self.bodies, self.ref, self.max_requests = ports, bodies, ref, max_requests
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.ok, self.failures, self.latencies = 0, [], []
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(threads)]

    def run(self, index):
        port = self.ports[index % len(self.ports)]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_SECONDS)
        n = 0
        while not self.stop_event.is_set() and n < self.max_requests:
            k = (index + n) % len(self.bodies)
            n += 1
            t0 = time.perf_counter()
            try:
                status, answer = infer(conn, self.bodies[k])
                error = None if status == 200 else f"status {status}: {answer[:200]!r}"
                if error is None and not close_enough(logits(answer), self.ref[k]):
                    error = f"wrong logits for input {k}: {answer[:200]!r}"
            except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                error = f"{type(e).__name__}: {e}"
                conn.close()
            latency = time.perf_counter() - t0
            with self.lock:
                if error is None:
                    self.ok += 1
                    self.latencies.append((time.time(), latency))
                else:
                    self.failures.append(f"{time.strftime('%T')} port {port}: {error}")

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        for t in self.threads:
            t.join(REQUEST_SECONDS + 5)
        if any(t.is_alive() for t in self.threads):
            raise Failure(f"a client thread did not finish within {REQUEST_SECONDS + 5} s of the end of the load")

    def count(self):
        with self.lock:
            return self.ok + len(self.failures)


def percentiles(latencies, skip=()):
    """p50, p99 and max in ms of the (end time, seconds) pairs that ended outside the `skip` intervals."""
    s = sorted(lat for end, lat in latencies if not any(a <= end <= b for a, b in skip))
    pick = lambda q: round(s[min(len(s) - 1, int(q * len(s)))] * 1e3, 3) if s else None
    return {"p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": pick(1.0)}


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
            first_restart = time.time()
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
        seen, retried = replica_windows(d.access_log, d.replicas, first_restart, last_restart)
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
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # tear down on these too
        signal.signal(sig, lambda s, f: sys.exit(f"rolling_restart_test: signal {s}: tearing down"))
    try:
        return run(args)
    except (Failure, subprocess.SubprocessError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
