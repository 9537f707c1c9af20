#!/usr/bin/python3
"""Closed-loop load on a generate_stream endpoint: C clients, each sending its next request when its
previous one ended, over the same prompts (bench/gen/prompts.py); prints one JSON line with
generated tokens per second, time to first token and inter-token latency percentiles (ms), and the
client's own CPU seconds (so a reader sees how much of the machine the load took).

    load.py URL MODEL --concurrency 8 --requests 64 --max-tokens 128

The C clients are non-blocking connections on one thread (a selector loop: no thread switches or
lock hand-offs per event), each parsing its chunked response and server-sent events itself.
A token is a byte of the byte-level model: a request that ended for its length generated
max_tokens; an event's text counts its UTF-8 bytes (a U+FFFD replacement as the one byte it stands
for), and the time between two events is split evenly over the second event's bytes (an event holds
whole characters, so a character of several bytes arrives at once)."""
import argparse
import json
import selectors
import socket
import sys
import time
import urllib.parse

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from prompts import prompts  # noqa: E402


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


class Client:
    """One request on its own connection: the response's head, then its chunked body's events."""

    def __init__(self, host, port, model, prompt, max_tokens):
        body = json.dumps({"text_input": prompt, "parameters": {"max_tokens": max_tokens}}).encode()
        head = (f"POST /v2/models/{model}/generate_stream HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        self.out = head.encode() + body
        self.sock = socket.create_connection((host, port), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.raw = b""       # bytes not yet parsed at the HTTP level
        self.events = b""    # the body's bytes not yet split into events
        self.head_done = False
        self.chunk_left = -1  # bytes left of the current chunk and its CRLF (-1: at a chunk-size line)
        self.start = time.perf_counter()
        self.first, self.last, self.tokens, self.gaps = None, None, 0, []
        self.error = None
        self.finished = False
        self.finish = None  # the last event's finish_reason

    def send(self):
        n = self.sock.send(self.out)
        self.out = self.out[n:]

    def feed(self, data):
        self.raw += data
        if not self.head_done:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return
            status = self.raw.split(b" ", 2)[1]
            if status != b"200":
                self.error = f"HTTP {status.decode()}: {self.raw[:300]!r}"
                self.finished = True
                return
            self.raw = self.raw[end + 4:]
            self.head_done = True
        while self.raw and not self.finished:
            if self.chunk_left < 0:  # a chunk-size line
                eol = self.raw.find(b"\r\n")
                if eol < 0:
                    break
                size = int(self.raw[:eol].split(b";")[0], 16)
                self.raw = self.raw[eol + 2:]
                self.finished = size == 0
                self.chunk_left = size + 2  # its data, then CRLF
                continue
            take = self.raw[:self.chunk_left]
            self.raw = self.raw[len(take):]
            self.chunk_left -= len(take)
            self.events += take
            if self.chunk_left == 0:
                self.events = self.events[:-2]  # the CRLF after the chunk's data
                self.chunk_left = -1
        self.parse_events()

    def parse_events(self):
        while True:
            end = self.events.find(b"\n\n")
            if end < 0:
                return
            block, self.events = self.events[:end], self.events[end + 2:]
            for line in block.split(b"\n"):
                if not line.startswith(b"data: "):
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    self.error = str(event["error"])
                    continue
                if event.get("finish_reason"):
                    self.finish = event["finish_reason"]
                text = event.get("text_output", "")
                # tokens are bytes; a U+FFFD (3 bytes) stands for one byte that formed no character
                n = len(text.encode("utf-8")) - 2 * text.count("\ufffd")
                if n == 0:
                    continue
                now = time.perf_counter()
                if self.first is None:
                    self.first = now - self.start
                else:
                    self.gaps.extend([(now - self.last) / n] * n)
                self.last = now
                self.tokens += n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=0, help="default: 4 per client, at least 8")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=600, help="seconds the whole run may take")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    n = a.requests or max(8, 4 * a.concurrency)
    todo = prompts(n)
    sel = selectors.DefaultSelector()
    results, errors = [], []

    def launch():
        c = Client(u.hostname, u.port, a.model, todo.pop(), a.max_tokens)
        sel.register(c.sock, selectors.EVENT_WRITE, c)

    def end(c, error=None):
        sel.unregister(c.sock)
        c.sock.close()
        error = error or c.error or (None if c.finished else "the connection closed before the last chunk")
        if error:
            errors.append(error)
        else:
            results.append(c)
        if todo:
            launch()

    cpu0, start = time.process_time(), time.perf_counter()
    for _ in range(min(a.concurrency, len(todo))):
        launch()
    while sel.get_map():
        if time.perf_counter() - start > a.timeout:
            sys.exit(f"load.py: {len(sel.get_map())} requests still running after {a.timeout} s")
        for key, mask in sel.select(timeout=1.0):
            c = key.data
            try:
                if mask & selectors.EVENT_WRITE:
                    c.send()
                    if not c.out:
                        sel.modify(c.sock, selectors.EVENT_READ, c)
                    continue
                data = c.sock.recv(1 << 16)
                if data:
                    c.feed(data)
                if not data or c.finished:
                    end(c)
            except (OSError, ValueError) as e:  # reported, the run goes on
                end(c, f"{type(e).__name__}: {e}")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    # a request that ended for its length generated exactly max_tokens
    tokens = sum(a.max_tokens if r.finish == "length" else r.tokens for r in results)
    ttft = [r.first * 1e3 for r in results if r.first is not None]
    gaps = [g * 1e3 for r in results for g in r.gaps]
    print(json.dumps({"runtime": "hgraph-serve", "concurrency": a.concurrency, "requests": len(results),
                      "errors": len(errors), "first_error": errors[0] if errors else None, "tokens": tokens,
                      "seconds": wall, "tokens_per_s": tokens / wall,
                      "ttft_ms_p50": percentile(ttft, 50), "ttft_ms_p99": percentile(ttft, 99),
                      "itl_ms_p50": percentile(gaps, 50), "itl_ms_p99": percentile(gaps, 99),
                      "client_cpu_s": cpu}))


if __name__ == "__main__":
    main()
