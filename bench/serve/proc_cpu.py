"""CPU time of process trees, from /proc (Linux).

  proc_cpu.py seconds PID...     prints the CPU seconds (user + system) the trees rooted at PIDs used
  proc_cpu.py wait-idle PID...   returns once the trees used under 5% of a core for 0.5 s (at most 300 s)

run_serve.sh samples `seconds` around each cell (server CPU per request) and waits for idle
servers between cells (a server keeps working through the requests queued when wrk stops).
"""
import os
import sys
import time


def cpu_seconds(roots):
    parent, ticks = {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(pid)], ticks[int(pid)] = int(fields[1]), int(fields[11]) + int(fields[12])

    def in_tree(pid):
        while pid > 1:
            if pid in roots:
                return True
            pid = parent.get(pid, 0)
        return False

    return sum(t for pid, t in ticks.items() if in_tree(pid)) / os.sysconf("SC_CLK_TCK")


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("seconds", "wait-idle"):
        sys.exit(__doc__)
    roots = {int(p) for p in sys.argv[2:]}
    if sys.argv[1] == "seconds":
        print(f"{cpu_seconds(roots):.2f}")
        return
    start, before = time.time(), cpu_seconds(roots)
    while time.time() - start < 300:
        time.sleep(0.5)
        now = cpu_seconds(roots)
        if now - before < 0.025:
            break
        before = now


if __name__ == "__main__":
    main()
