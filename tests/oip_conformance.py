#!/usr/bin/python3
"""Open Inference Protocol conformance: the JSON that hgraph-serve answers must validate against
the official schemas in tests/data/open_inference_rest.yaml (kserve/open-inference-protocol).

Usage: /usr/bin/python3 tests/oip_conformance.py PATH/TO/hgraph-serve

Builds a model repository in a temporary directory (the bundled digits_mlp, and an identity
model whose BOOL, INT32, UINT64 and FP64 tensors put booleans and integers in tensor_data),
starts hgraph-serve on 127.0.0.1 with an ephemeral port, and for every path of the yaml, for
each model (its name and version filled in, and also without the optional /versions/{v}
segment) sends a request: a valid one,
whose answer must have the documented success status, content type and schema, and for each
documented error status a request that provokes it, whose body must validate against that
error schema. Errors the yaml does not document (404, 405) must still be {"error": str}.
The request bodies this script sends are validated against the request schema first.
Exits 1 naming each failing method, path and validation error; 0 when everything conforms.
"""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "data", "open_inference_rest.yaml")
BUNDLED_MODEL = os.path.join(HERE, "..", "models", "repository", "digits_mlp")
MODELS = ["digits_mlp", "ident"]
VERSION = "1"
IDENTITY_CONFIG = {
    "platform": "identity", "max_batch_size": 4,
    "input": [{"name": "IN_" + t, "data_type": "TYPE_" + t, "dims": [2]} for t in ("BOOL", "INT32", "UINT64", "FP64")],
    "output": [{"name": "OUT_" + t, "data_type": "TYPE_" + t, "dims": [2]} for t in ("BOOL", "INT32", "UINT64", "FP64")],
}
STARTUP_SECONDS = 180
REQUEST_SECONDS = 30


class Spec:
    """The yaml's schemas, with $ref resolved against the whole document."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.doc = yaml.safe_load(f)
        self.resolver = jsonschema.RefResolver.from_schema(self.doc)

    def errors(self, schema_ref, instance):
        """Validation errors of `instance` against the schema at `schema_ref` ('#/components/...')."""
        validator = jsonschema.Draft4Validator({"$ref": schema_ref}, resolver=self.resolver)
        return sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))

    def operations(self):
        """(path template, method, {status: (content type, schema $ref or None)}, request schema $ref)."""
        for template, item in self.doc["paths"].items():
            for method in ("get", "post"):
                op = item.get(method)
                if op is None:
                    continue
                responses = {}
                for status, resp in op["responses"].items():
                    content = resp.get("content") or {}
                    ctype, body = next(iter(content.items()), (None, {}))
                    responses[int(status)] = (ctype, (body.get("schema") or {}).get("$ref"))
                req = ((op.get("requestBody") or {}).get("content") or {}).get("application/json", {})
                yield template, method.upper(), responses, (req.get("schema") or {}).get("$ref")


def child_setup():
    """Runs in the server process before exec: die with this script."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_server(binary, repo):
    proc = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", "0", "--model-repository", repo],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, preexec_fn=child_setup, text=True)
    deadline = time.monotonic() + STARTUP_SECONDS
    seen = []
    marker = "listening on http://"
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return proc, "http://" + line.split(marker, 1)[1].strip()
    proc.kill()
    proc.wait()
    raise RuntimeError("hgraph-serve did not start; stdout: " + "".join(seen))


def request(base, method, path, body=None):
    """(status, content type, parsed JSON or the raw text when it is not JSON)."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_SECONDS) as r:
            status, ctype, raw = r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        status, ctype, raw = e.code, e.headers.get("Content-Type", ""), e.read()
    try:
        return status, ctype, json.loads(raw)
    except ValueError:
        return status, ctype, raw.decode(errors="replace")


def valid_infer_body(metadata):
    """A batch-1 request for the model: every input, variable dimensions set to 1, data of its type."""
    inputs = []
    for t in metadata["inputs"]:
        shape = [1 if d < 0 else d for d in t["shape"]]
        count = 1
        for d in shape:
            count *= d
        value = {"BOOL": True, "FP32": 0.5, "FP64": -2.25, "UINT64": 2**64 - 1}.get(t["datatype"], 7)
        inputs.append({"name": t["name"], "shape": shape, "datatype": t["datatype"], "data": [value] * count})
    return {"id": "conformance-1", "inputs": inputs, "outputs": [{"name": t["name"]} for t in metadata["outputs"]]}


def bad_infer_bodies(metadata):
    """Requests that are 400s, with what is wrong with each (a malformed body is bytes)."""
    good = valid_infer_body(metadata)
    wrong_type = json.loads(json.dumps(good))
    wrong_type["inputs"][0]["datatype"] = "BYTES" if good["inputs"][0]["datatype"] != "BYTES" else "FP32"
    wrong_count = json.loads(json.dumps(good))
    wrong_count["inputs"][0]["data"] = wrong_count["inputs"][0]["data"][:-1] or [0, 0]
    return [("malformed JSON", b'{"inputs": [{"name": '), ("wrong datatype", wrong_type),
            ("element count not matching the shape", wrong_count), ("no inputs", {"inputs": []})]


class Checker:
    def __init__(self, spec, base):
        self.spec, self.base, self.failures, self.checked = spec, base, [], 0

    def fail(self, method, path, what):
        self.failures.append(f"{method} {path}: {what}")

    def check(self, method, path, body, want_status, ctype, schema_ref):
        status, got_ctype, got = request(self.base, method, path, body)
        self.checked += 1
        if status != want_status:
            self.fail(method, path, f"status {status}, expected {want_status}; body: {str(got)[:300]}")
            return None
        if ctype and not got_ctype.startswith(ctype):
            self.fail(method, path, f"Content-Type '{got_ctype}', expected {ctype}")
        if schema_ref:
            if isinstance(got, str):
                self.fail(method, path, f"body is not JSON: {got[:300]}")
                return None
            for e in self.spec.errors(schema_ref, got):
                where = "/".join(str(p) for p in e.absolute_path) or "(root)"
                self.fail(method, path, f"{schema_ref} at {where}: {e.message}")
        return got

    def check_error_body(self, method, path, body, want_status):
        """An undocumented error status: the common {"error": str} object."""
        self.check(method, path, body, want_status, "application/json",
                   "#/components/schemas/metadata_server_error_response")

    def check_request(self, method, path, schema_ref, body):
        """Our own request must be what the spec describes, or the check proves nothing."""
        for e in self.spec.errors(schema_ref, body):
            self.fail(method, path, f"the test's request does not validate against {schema_ref}: {e.message}")


def fill(template, model):
    return template.replace("${MODEL_NAME}", model).replace("${MODEL_VERSION}", VERSION)


def run(spec, base):
    c = Checker(spec, base)
    for model in MODELS:
        run_model(c, spec, base, model)
    c.check_error_body("GET", "/v2/no/such/path", None, 404)
    return c


def run_model(c, spec, base, model):
    metadata = request(base, "GET", f"/v2/models/{model}")[2]
    if not isinstance(metadata, dict) or "inputs" not in metadata:
        c.fail("GET", f"/v2/models/{model}", f"no model metadata to build requests from: {metadata}")
        return
    for template, method, responses, request_ref in spec.operations():
        if "${MODEL_NAME}" not in template and model != MODELS[0]:
            continue  # server-level paths once
        paths = [fill(template, model)]
        if "/versions/${MODEL_VERSION}" in template:
            paths.append(fill(template.replace("/versions/${MODEL_VERSION}", ""), model))
        if template.rstrip("/") == "/v2":
            paths = ["/v2", "/v2/"]
        for path in paths:
            ok = min(s for s in responses if 200 <= s < 300)
            ctype, schema = responses[ok]
            body = valid_infer_body(metadata) if method == "POST" else None
            if body is not None and request_ref:
                c.check_request(method, path, request_ref, body)
            got = c.check(method, path, body, ok, ctype, schema)
            if isinstance(got, dict) and body is not None and got.get("id") != body["id"]:
                c.fail(method, path, f"request id not echoed: {got.get('id')}")
            if 400 in responses and method == "POST":
                err_ctype, err_schema = responses[400]
                for what, bad in bad_infer_bodies(metadata):
                    before = len(c.failures)
                    c.check(method, path, bad, 400, err_ctype, err_schema)
                    if len(c.failures) > before:
                        c.failures[-1] += f" (request: {what})"
            # Wrong method: 405 with the error object.
            c.check_error_body("PUT", path, None, 405)
            # The same path for a model that does not exist: 404 with the error object.
            if f"/models/{model}" in path:
                missing = path.replace(f"/models/{model}", "/models/no_such_model")
                c.check_error_body(method, missing, body, 404)
            if "/versions/" in path:
                c.check_error_body(method, path.replace(f"/versions/{VERSION}", "/versions/999"), body, 404)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    spec = Spec(SPEC)
    tmp = tempfile.mkdtemp(prefix="hgraph_oip_")
    proc = None
    try:
        shutil.copytree(os.path.join(BUNDLED_MODEL, VERSION), os.path.join(tmp, "digits_mlp", VERSION))
        os.makedirs(os.path.join(tmp, "ident", VERSION))
        with open(os.path.join(tmp, "ident", "config.json"), "w", encoding="utf-8") as f:
            json.dump(IDENTITY_CONFIG, f)
        proc, base = start_server(sys.argv[1], tmp)
        c = run(spec, base)
        for f in c.failures:
            print("FAIL", f)
        print(f"{c.checked} responses checked against {os.path.basename(SPEC)}, {len(c.failures)} failures")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        if code != 0:
            print(f"FAIL hgraph-serve exited with {code} after SIGTERM")
            return 1
        proc = None
        return 1 if c.failures else 0
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
