"""Two hgraph-serve replicas behind nginx on free loopback ports, as the current user, every file
in one temporary directory: deploy/nginx-hgraph.conf with its ports replaced, nginx with `daemon
off;`, the replicas started by deploy/rolling_restart.sh's --start command. deploy/rolling_restart_test.py
drives it; stop() ends every process it started and names any it could not.
"""
import ctypes
import grp
import http.client
import os
import pwd
import random
import shlex
import shutil
import signal
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NGINX_CONF = os.path.join(HERE, "nginx-hgraph.conf")
RESTART = os.path.join(HERE, "rolling_restart.sh")
# The addresses deploy/nginx-hgraph.conf ships with (deploy/prometheus.yml scrapes the two replicas).
SHIPPED = {"replica_a": "127.0.0.1:8001", "replica_b": "127.0.0.1:8002", "nginx": "listen 127.0.0.1:8080;"}
DRAIN_SECONDS = 10  # the replicas' --drain-timeout
START_SECONDS = 60  # a replica's start-up until ready, nginx's until it accepts


class Failure(Exception):
    pass


def wait_for(what, seconds, check, interval=0.1):
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {seconds} s waiting for {what}")
        time.sleep(interval)


def free_ports(n):
    """n free loopback ports below the ephemeral range: a replica's port stays free while it restarts
    (an ephemeral one could meanwhile become the local port of some outgoing connection)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = map(int, f.read().split())
    span = (10000, low) if low > 11000 else (high + 1, 65536)
    rng = random.Random()
    ports = []
    for _ in range(1000):
        port = rng.randrange(*span)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
        if len(ports) == n:
            return ports
    raise Failure(f"found no {n} free loopback ports in [{span[0]}, {span[1]})")


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


class Deployment:
    """Two replicas and nginx in `tmp`; stop() ends every process it started, whatever happened."""

    def __init__(self, serve, tmp):
        self.tmp = tmp
        self.ports = dict(zip(("replica_a", "replica_b", "nginx"), free_ports(3)))
        self.replicas = [self.ports["replica_a"], self.ports["replica_b"]]
        self.pid_file = os.path.join(tmp, "replica-%p.pid")
        q = shlex.quote
        self.start_cmd = (f"OMP_NUM_THREADS=1 {q(serve)} --host 127.0.0.1 --port \"$1\" "
                          f"--drain-timeout {DRAIN_SECONDS} < /dev/null >> {q(tmp)}/replica-\"$1\".log 2>&1 & "
                          f"echo $! > {q(tmp)}/replica-\"$1\".pid")
        self.nginx = None
        self.access_log = os.path.join(tmp, "access.log")

    def replica_pid(self, port):
        try:
            with open(self.pid_file.replace("%p", str(port))) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def ready_or_raise(self, port, log):
        if get(port, "/v2/health/ready")[0] == 200:
            return True
        pid = self.replica_pid(port)
        if pid is not None and not alive(pid):
            with open(log) as f:
                raise Failure(f"the replica on port {port} exited while starting; {log} begins: {f.read(300)}")
        return False

    def start(self):
        for port in self.replicas:
            subprocess.run(["bash", "-c", self.start_cmd, "start", str(port)], check=True, timeout=10)
        for port in self.replicas:
            log = f"{self.tmp}/replica-{port}.log"
            wait_for(f"the replica on port {port} to answer 200 on /v2/health/ready (log: {log})",
                     START_SECONDS, lambda: self.ready_or_raise(port, log))
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
