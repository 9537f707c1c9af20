"""Starts hgraph-serve for a benchmark script (bench/serve/compression_bench.py, burst_memory.py).

    from serve_proc import start_server
    proc, port = start_server([binary, "--host", "127.0.0.1", "--port", "0", ...], env=None)

Waits up to 120 s for the "listening on http://HOST:PORT" line, then keeps reading the server's
stdout on a daemon thread (a full pipe would block it); exits the script when the server does not
start.
"""
import re
import subprocess
import sys
import threading
import time


def start_server(args, env=None):
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, int(m.group(1))
    proc.kill()
    sys.exit(f"hgraph-serve did not start: {' '.join(args)}")
