"""Steady inference load: client threads POSTing digits_mlp inferences over keep-alive
connections, each answer checked against the logits the replicas gave directly, every answer
counted, latencies kept for percentiles.
"""
import http.client
import json
import threading
import time

from local_fleet import Failure

INFER = "/v2/models/digits_mlp/infer"
REQUEST_SECONDS = 30


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
