#!/usr/bin/python3
"""ONNX coverage: for each PyTorch export written by scripts/onnx_exports.py, does hgraph-serve load
it and answer what PyTorch answered, and (--ort) does ONNX Runtime?

Usage: /usr/bin/python3 bench/onnx_coverage.py OUT_DIR [--serve BIN] [--convert BIN] [--ort]
           [--only REGEX] [--load-timeout S] [--infer-timeout S] [--ort-timeout S] [--ort-threads N]
  OUT_DIR        the exports' directory (cases.json, <case>/1/model.onnx, <case>.safetensors)
  --serve BIN    hgraph-serve (default: build/server/hgraph-serve of this checkout)
  --convert BIN  hgraph-convert (default: build/models/hgraph-convert; skipped when absent): its
                 --list-ops against each model's op types names every op outside the importer,
                 not only the first one a load stops at
  --ort          also run each model.onnx through onnxruntime-node (bench/ort_run.js; the package
                 is found in bench/node_modules or through NODE_PATH)
  --only REGEX   the cases whose name matches REGEX (re.search)

hgraph: starts BIN --model-repository OUT_DIR --model-control-mode explicit --host 127.0.0.1
--port 0 --batch-sizes 1,3 (its port is read from the "listening on" line; its stderr goes to
OUT_DIR/serve.log). For each case it loads the model (POST /v2/repository/models/<case>/load), takes
the model's state and reason from POST /v2/repository/index, sends each reference set (batch 3, and
batch 1) to POST /v2/models/<case>/infer with binary tensor data both ways, then unloads the model.
A server that dies or does not answer a load in time is recorded against the case and started again;
every wait is bounded and the server is stopped (SIGTERM, then SIGKILL) on exit.

Error: for each output, max|answer - pytorch| / max(max|pytorch|, 1e-6) (the max-norm relative
error); a case's error is the largest over its outputs and both sets. A wrong shape, a missing
output or any NaN/Inf in the answer counts as an infinite error. Pass: error <= 1e-4, or 1e-3 for a
network deeper than 50 weight layers (cases.json's depth).

Writes the table (case, family, opset, folding, then per runtime: loaded, error, max rel err, pass),
a summary of the failures grouped by reason, the ops outside hgraph's importer with the cases that
use them, and pass counts by family, opset and folding to stdout and OUT_DIR/coverage.md, and every
result with its full messages and timings to OUT_DIR/coverage.json. Exit status 0 unless the harness
itself fails (failing cases are results).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict

import numpy as np

import safetensors_np  # noqa: E402 (bench/, this script's folder)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SERVE = os.path.join(os.path.dirname(HERE), "build", "server", "hgraph-serve")
DEFAULT_CONVERT = os.path.join(os.path.dirname(HERE), "build", "models", "hgraph-convert")
KSERVE = {np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64", np.dtype(np.int64): "INT64",
          np.dtype(np.int32): "INT32", np.dtype(np.bool_): "BOOL"}
FROM_KSERVE = {v: k for k, v in KSERVE.items()}


class ServerDown(Exception):
    """hgraph-serve is gone or stuck: the case is charged with it and the server restarted."""


def read_safetensors(path):
    return safetensors_np.read(path)


def reference_sets(case, tensors):
    """[(batch, {input name: array}, {output name: array})] for each set of the case."""
    sets = []
    for s in case["sets"]:
        ins = {i["name"]: tensors[i["name"] + s["suffix"]] for i in case["inputs"]}
        outs = {o["name"]: tensors[o["name"] + s["suffix"]] for o in case["outputs"]}
        sets.append((s["batch"], ins, outs))
    return sets


def rel_error(got, want):
    """max|got - want| / max(max|want|, 1e-6); inf for a wrong shape or a non-finite answer."""
    if got is None or tuple(got.shape) != tuple(want.shape):
        return float("inf")
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.all(np.isfinite(g)):
        return float("inf")
    if g.size == 0:
        return 0.0
    return float(np.max(np.abs(g - w)) / max(float(np.max(np.abs(w))), 1e-6))


def compare(answers, sets):
    """answers: [{output name: array}] per set -> (error, what went wrong or None)."""
    worst, problem = 0.0, None
    for got, (_, _, want) in zip(answers, sets):
        for name, ref in want.items():
            a = got.get(name)
            e = rel_error(a, ref)
            if e == float("inf") and problem is None:
                problem = (f"output '{name}' missing" if a is None else
                           f"output '{name}' has shape {list(a.shape)}, expected {list(ref.shape)}"
                           if tuple(a.shape) != tuple(ref.shape) else f"output '{name}' has NaN/Inf")
            worst = max(worst, e)
    return worst, problem


# ---- hgraph-serve -------------------------------------------------------------------------------

class Server:
    def __init__(self, binary, repo, log_path):
        self.binary, self.repo, self.log_path = binary, repo, log_path
        self.proc, self.port, self.starts = None, None, 0

    def start(self):
        out_path = self.log_path + ".stdout"
        cmd = [self.binary, "--model-repository", self.repo, "--model-control-mode", "explicit",
               "--host", "127.0.0.1", "--port", "0", "--batch-sizes", "1,3"]
        with open(out_path, "w") as out, open(self.log_path, "a") as err:
            err.write(f"==== {' '.join(cmd)}\n")
            err.flush()
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self.starts += 1
        deadline = time.time() + 60
        while time.time() < deadline:
            with open(out_path) as f:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with status {self.proc.returncode} at start "
                                   f"(see {self.log_path})")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.binary} did not print its port within 60 s (see {self.log_path})")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)

    def died(self):
        """Why the server is gone (exit status or signal), or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        return f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"

    def request(self, method, path, body=b"", headers=None, timeout=60):
        """-> (status, headers, body). ServerDown when the server cannot be reached or does not answer."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r, r.read()
        except (OSError, http.client.HTTPException) as e:
            try:
                self.proc.wait(timeout=5)  # a server on its way out: take its exit status
            except subprocess.TimeoutExpired:
                pass
            gone = self.died()
            what = f"no answer within {timeout:g} s" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
            raise ServerDown(f"hgraph-serve {gone}" if gone else f"{method} {path}: {what}") from None
        finally:
            conn.close()

    def restart(self):
        self.stop()
        self.start()


def clean_error(message):
    """The server's load error without the version folder and model path it starts with."""
    message = re.sub(r"^version \d+ \([^)]*\): ", "", message)
    return re.sub(r"\S*/model\.onnx: ", "", message)


def error_text(body):
    try:
        return json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace")[:500]


def infer(server, name, inputs, timeout):
    """Binary tensor data both ways -> ({output name: array}, None) or (None, error)."""
    header = {"inputs": [{"name": k, "shape": list(v.shape), "datatype": KSERVE[v.dtype],
                          "parameters": {"binary_data_size": v.nbytes}} for k, v in inputs.items()],
              "parameters": {"binary_data_output": True}}
    head = json.dumps(header).encode()
    body = head + b"".join(np.ascontiguousarray(v).tobytes() for v in inputs.values())
    status, r, data = server.request("POST", f"/v2/models/{name}/infer", body,
                                     {"Inference-Header-Content-Length": str(len(head)),
                                      "Content-Type": "application/octet-stream"}, timeout)
    if status != 200:
        return None, f"infer HTTP {status}: {error_text(data)}"
    n = int(r.getheader("Inference-Header-Content-Length") or len(data))
    answer, offset, outs = json.loads(data[:n]), n, {}
    for o in answer["outputs"]:
        dtype = FROM_KSERVE.get(o["datatype"])
        if dtype is None:
            return None, f"output '{o['name']}' has datatype {o['datatype']}"
        if "data" in o:
            outs[o["name"]] = np.array(o["data"], dtype=dtype).reshape(o["shape"])
            continue
        size = o["parameters"]["binary_data_size"]
        outs[o["name"]] = np.frombuffer(data[offset:offset + size], dtype=dtype).reshape(o["shape"])
        offset += size
    return outs, None


def run_hgraph(server, case, sets, args):
    """-> result dict: loaded, error, err, pass, timings."""
    name, res = case["name"], {"loaded": False}
    t0 = time.time()
    status, _, body = server.request("POST", f"/v2/repository/models/{name}/load", b"{}", timeout=args.load_timeout)
    res["load_s"] = round(time.time() - t0, 2)
    _, _, index = server.request("POST", "/v2/repository/index", b"{}", timeout=60)
    entry = next((e for e in json.loads(index) if e["name"] == name), {})
    res["state"] = entry.get("state", "absent from the index")
    if res["state"] != "READY":
        reason = entry.get("reason") or (error_text(body) if status != 200 else "")
        res["error"] = clean_error(reason) if reason else f"state {res['state']}"
        return res
    res["loaded"] = True
    answers, t0 = [], time.time()
    try:
        for _, ins, _ in sets:
            outs, err = infer(server, name, ins, args.infer_timeout)
            if err:
                res["error"] = err
                return res
            answers.append(outs)
        res["infer_ms"] = round((time.time() - t0) * 1000, 1)
        res["err"], problem = compare(answers, sets)
        if problem:
            res["error"] = problem
    finally:
        server.request("POST", f"/v2/repository/models/{name}/unload", b"{}", timeout=120)
    return res


# ---- ONNX Runtime -------------------------------------------------------------------------------

def node_env():
    """The environment for node: onnxruntime-node from NODE_PATH or bench/node_modules."""
    env = dict(os.environ)
    env["NODE_PATH"] = os.pathsep.join(p for p in (env.get("NODE_PATH"), os.path.join(HERE, "node_modules")) if p)
    return env


def run_ort(model, sets, args):
    res = {"loaded": False}
    with tempfile.TemporaryDirectory(prefix="onnx_coverage_") as tmp:
        dirs = []
        for k, (_, ins, _) in enumerate(sets):
            d = os.path.join(tmp, str(k))
            os.mkdir(d)
            for name, x in ins.items():
                np.save(os.path.join(d, f"in.{name}.npy"), x)
            dirs.append(d)
        try:
            p = subprocess.run(["node", os.path.join(HERE, "ort_run.js"), model, str(args.ort_threads)] + dirs,
                               capture_output=True, text=True, timeout=args.ort_timeout, env=node_env())
        except subprocess.TimeoutExpired:
            res["error"] = f"no answer within {args.ort_timeout} s"
            return res
        lines = p.stdout.strip().splitlines()
        try:
            report = json.loads(lines[-1])
        except (IndexError, ValueError):
            res["error"] = f"ort_run.js exited with status {p.returncode}: {p.stderr.strip()[-500:]}"
            return res
        if "error" in report:
            res["loaded"] = report["stage"] != "load"
            res["error"] = report["error"]
            return res
        res["loaded"], res["load_s"] = True, round(report["load_ms"] / 1000, 2)
        res["infer_ms"] = round(sum(report["run_ms"]), 1)
        answers = []
        for d, (_, _, want) in zip(dirs, sets):
            answers.append({n: np.load(os.path.join(d, f"out.{n}.npy")) for n in want
                            if os.path.exists(os.path.join(d, f"out.{n}.npy"))})
        res["err"], problem = compare(answers, sets)
        if problem:
            res["error"] = problem
    return res


# ---- the ops of each model against hgraph's importer ---------------------------------------------

def importer_ops(convert):
    """The op types in hgraph's importer registry (hgraph-convert --list-ops), or None without it."""
    if not os.access(convert, os.X_OK):
        return None
    p = subprocess.run([convert, "--list-ops"], capture_output=True, text=True, timeout=60, check=True)
    listed = {m.group(1) for m in re.finditer(r"^\| (\w+) \|", p.stdout, re.M)} - {"Op"}
    return listed | {"Constant"}  # read into a constant by the importer itself


def model_ops(path):
    """Every op type of an ONNX file, subgraphs included."""
    import onnx  # only for this: Debian's /usr/bin/python3 has it
    ops, graphs = set(), [onnx.load(path, load_external_data=False).graph]
    while graphs:
        g = graphs.pop()
        for node in g.node:
            ops.add(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}")
            graphs += [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
            graphs += [sub for a in node.attribute if a.type == onnx.AttributeProto.GRAPHS for sub in a.graphs]
    return ops


# ---- report -------------------------------------------------------------------------------------

def judge(res, tol):
    res["pass"] = res.get("error") is None and res.get("err", float("inf")) <= tol
    if not res["pass"] and res.get("error") is None:
        res["error"] = f"wrong results (max rel err {res['err']:.2g} > {tol:g})"
    return res


def reason_class(error):
    """A failure message with what differs from case to case (paths, node names, numbers) taken out."""
    s = error.splitlines()[0] if error else ""
    s = re.sub(r"(/[\w.+-]+)+/model\.onnx", "<model>", s)
    s = re.sub(r"(/[\w.+-]+){2,}", "<path>", s)
    s = re.sub(r"wrong results \(max rel err [^>]*>", "wrong results (max rel err >", s)
    s = re.sub(r" \(node '[^']*', opset \d+\)", "", s)
    s = re.sub(r"(model|node|input|output|initializer|tensor|value) '[^']*'", r"\1 '…'", s)
    s = re.sub(r"\[[-\d, ]+\]", "[…]", s)
    s = re.sub(r"(?<![\w.])\d+(\.\d+)?(?![\w.])", "N", s)
    return s[:300]


def fmt_err(res):
    if "err" not in res:
        return ""
    return "inf" if res["err"] == float("inf") else f"{res['err']:.2e}"


def md_cell(text, width=110):
    text = (text or "").replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "…"


def versions(args):
    """What ran: the hgraph-serve binary (path, --version, modification time) and the ORT package."""
    v = subprocess.run([args.serve, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(args.serve)))
    lines = [f"- hgraph: `{args.serve}` ({v}, built {built})"]
    if args.ort:
        p = subprocess.run(["node", "-p", "require('onnxruntime-node/package.json').version"], capture_output=True,
                           text=True, timeout=30, env=node_env())
        lines.append(f"- ORT: onnxruntime-node {p.stdout.strip() or '(version unknown)'} (CPU, "
                     f"{args.ort_threads} intra-op threads, default graph optimizations)")
    return lines


def report(results, runtimes, header):
    lines = ["# ONNX coverage: PyTorch 1.13 exports", ""] + header
    total = len(results)
    for rt in runtimes:
        passed = sum(r[rt]["pass"] for r in results)
        loaded = sum(r[rt]["loaded"] for r in results)
        lines.append(f"- **{rt}**: {passed}/{total} pass, {loaded}/{total} load")
    if len(runtimes) == 2:
        lines.append(f"- hgraph fails where ORT passes: {sum(r['ORT']['pass'] and not r['hgraph']['pass'] for r in results)}; "
                     f"ORT fails where hgraph passes: {sum(r['hgraph']['pass'] and not r['ORT']['pass'] for r in results)}")
    lines.append("- error: max|answer - PyTorch| / max(max|PyTorch|, 1e-6) over every output of the batch-3 and "
                 "batch-1 sets; pass at 1e-4 (1e-3 deeper than 50 weight layers); NaN/Inf or a wrong shape is inf")
    if any("missing_ops" in r for r in results):
        lines.append("- missing ops: the op types of model.onnx that hgraph-convert --list-ops does not list, "
                     "whether or not the load got that far (an importer stops at the first)")
    lines += ["", "## Failures by reason", ""]
    for rt in runtimes:
        groups = defaultdict(list)
        for r in results:
            if not r[rt]["pass"]:
                groups[reason_class(r[rt]["error"])].append(r)
        lines += [f"### {rt}: {sum(len(v) for v in groups.values())} failing", "",
                  "| cases | reason | families (cases) | example |", "|---|---|---|---|"]
        for reason, rs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            fams = Counter(r["family"] for r in rs)
            fam_text = ", ".join(f"{f} ({n})" for f, n in sorted(fams.items(), key=lambda kv: (-kv[1], kv[0])))
            lines.append(f"| {len(rs)} | {md_cell(reason, 200)} | {md_cell(fam_text, 300)} | {rs[0]['name']} |")
        lines.append("")
    missing = defaultdict(list)
    for r in results:
        for op in r.get("missing_ops", ()):
            missing[op].append(r)
    if missing:
        lines += ["## ONNX ops outside hgraph's importer", "", "| op | cases | families (cases) | opsets |",
                  "|---|---|---|---|"]
        for op, rs in sorted(missing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            fams = Counter(r["family"] for r in rs)
            lines.append(f"| {op} | {len(rs)} | " + ", ".join(f"{f} ({n})" for f, n in fams.most_common())
                         + " | " + ", ".join(str(o) for o in sorted({r["opset"] for r in rs})) + " |")
        lines.append("")
    for key, title in (("family", "family"), ("opset", "opset"), ("constant_folding", "constant folding")):
        lines += [f"## By {title}", "", f"| {title} | cases | " + " | ".join(f"{rt} pass" for rt in runtimes) + " |",
                  "|---|---|" + "---|" * len(runtimes)]
        groups = defaultdict(list)
        for r in results:
            groups[r[key]].append(r)
        for value, rs in sorted(groups.items(), key=lambda kv: kv[0]) if key != "family" else groups.items():
            lines.append(f"| {value} | {len(rs)} | " + " | ".join(str(sum(r[rt]["pass"] for r in rs)) for rt in runtimes)
                         + " |")
        lines.append("")
    head = "| case | family | opset | folding |"
    rule = "|---|---|---|---|"
    for rt in runtimes:
        head += f" {rt} loaded | {rt} error | {rt} max rel err | {rt} pass |"
        rule += "---|---|---|---|"
    lines += ["## Cases", "", head, rule]
    for r in results:
        row = f"| {r['name']} | {r['family']} | {r['opset']} | {'on' if r['constant_folding'] else 'off'} |"
        for rt in runtimes:
            x = r[rt]
            row += (f" {'yes' if x['loaded'] else 'no'} | {md_cell(x.get('error'))} | {fmt_err(x)} |"
                    f" {'PASS' if x['pass'] else 'FAIL'} |")
        lines.append(row)
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description="ONNX coverage of hgraph-serve (and ONNX Runtime) on PyTorch exports")
    ap.add_argument("out_dir")
    ap.add_argument("--serve", default=DEFAULT_SERVE, metavar="BIN")
    ap.add_argument("--convert", default=DEFAULT_CONVERT, metavar="BIN",
                    help="hgraph-convert, for the importer's op list (skipped when absent)")
    ap.add_argument("--ort", action="store_true", help="also run onnxruntime-node (bench/ort_run.js)")
    ap.add_argument("--only", metavar="REGEX")
    ap.add_argument("--load-timeout", type=float, default=900, metavar="S")
    ap.add_argument("--infer-timeout", type=float, default=300, metavar="S")
    ap.add_argument("--ort-timeout", type=float, default=900, metavar="S")
    ap.add_argument("--ort-threads", type=int, default=2, metavar="N")
    args = ap.parse_args()
    out = os.path.abspath(args.out_dir)
    with open(os.path.join(out, "cases.json")) as f:
        cases = [c for c in json.load(f) if not args.only or re.search(args.only, c["name"])]
    if not cases:
        sys.exit(f"onnx_coverage.py: no case in {out}/cases.json" + (f" matches {args.only}" if args.only else ""))
    if not os.access(args.serve, os.X_OK):
        sys.exit(f"onnx_coverage.py: {args.serve} is not an executable (build it, or pass --serve)")
    if args.ort and not shutil.which("node"):
        sys.exit("onnx_coverage.py: --ort needs node on PATH")
    runtimes = ["hgraph"] + (["ORT"] if args.ort else [])
    supported = importer_ops(args.convert)
    server = Server(args.serve, out, os.path.join(out, "serve.log"))
    header, results, start = versions(args), [], time.time()
    server.start()
    try:
        for i, case in enumerate(cases):
            name = case["name"]
            tol = 1e-3 if case.get("depth", 0) > 50 else 1e-4
            r = {k: case[k] for k in ("name", "group", "family", "model", "opset", "constant_folding")}
            r["tolerance"] = tol
            if "export_error" in case:
                for rt in runtimes:
                    r[rt] = {"loaded": False, "pass": False, "error": "not exported: " + case["export_error"]}
                results.append(r)
                print(f"[{i + 1}/{len(cases)}] {name}: not exported", flush=True)
                continue
            if supported is not None:
                r["missing_ops"] = sorted(model_ops(os.path.join(out, name, "1", "model.onnx")) - supported)
            sets = reference_sets(case, read_safetensors(os.path.join(out, name + ".safetensors")))
            try:
                r["hgraph"] = run_hgraph(server, case, sets, args)
            except ServerDown as e:
                r["hgraph"] = {"loaded": False, "error": f"{e} (while serving this case)"}
                print(f"  {name}: {e}; restarting hgraph-serve", flush=True)
                server.restart()
            judge(r["hgraph"], tol)
            if args.ort:
                r["ORT"] = judge(run_ort(os.path.join(out, name, "1", "model.onnx"), sets, args), tol)
            results.append(r)
            status = "  ".join(f"{rt} {'PASS ' + fmt_err(r[rt]) if r[rt]['pass'] else 'FAIL'}"
                               f" (load {r[rt].get('load_s', '-')} s)"
                               + ("" if r[rt]["pass"] else f" [{md_cell(r[rt]['error'], 100)}]") for rt in runtimes)
            print(f"[{i + 1}/{len(cases)}] {name}: {status}", flush=True)
    finally:
        server.stop()
    md = report(results, runtimes, header)
    with open(os.path.join(out, "coverage.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "coverage.json"), "w") as f:
        json.dump([{k: ({kk: (str(vv) if isinstance(vv, float) and not np.isfinite(vv) else vv)
                         for kk, vv in v.items()} if isinstance(v, dict) else v) for k, v in r.items()}
                   for r in results], f, indent=1)
    print(md)
    print(f"{len(results)} cases in {time.time() - start:.0f} s ({server.starts} server start(s)); "
          f"written {out}/coverage.md and coverage.json")


if __name__ == "__main__":
    main()
