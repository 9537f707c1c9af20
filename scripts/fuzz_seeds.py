#!/usr/bin/env python3
"""Writes the seed corpora for hgraph-fuzz (fuzz/corpus/<target>/): valid inputs (files from the
repo, requests, configs, checkpoints, graph-cache entries) and hand-made broken ones (header
length beyond the file, overlapping or out-of-range offsets, dtype/shape mismatch, truncated
JSON, fields out of range, malformed HTTP). Run from anywhere: /usr/bin/python3 scripts/fuzz_seeds.py"""
import json
import pathlib
import re
import struct

root = pathlib.Path(__file__).resolve().parent.parent
corpus = root / "fuzz" / "corpus"
mark = b"\n--hgraph-fuzz-weights--\n"


def st(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def write(target, name, data):
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


f32 = lambda n: b"\0\0\x80\x3f" * n  # n ones
ok = {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
      "b": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]},
      "__metadata__": {"source": "seed"}}
seeds = {
    "valid_small": st(ok, f32(4) + struct.pack("<q", 7)),
    "header_beyond_file": struct.pack("<Q", 1 << 40) + b"{}",
    "overlap": st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, f32(3)),
    "out_of_range": st({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 160]}}, f32(4)),
    "dtype_shape_mismatch": st({"a": {"dtype": "F64", "shape": [4], "data_offsets": [0, 16]}}, f32(4)),
    "huge_shape": st({"a": {"dtype": "F32", "shape": [1 << 31, 1 << 31, 1 << 31], "data_offsets": [0, 4]}}, f32(1)),
    "negative_dim": st({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, b"x"),
    "truncated_json": struct.pack("<Q", 20) + b'{"a": {"dtype": "F3',
    "empty": b"",
    "number_overflow": st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).replace(b'[1]', b'[1e999]') + f32(1),
}
for name, data in seeds.items():
    write("safetensors", name, data)
for src in [root / "tests" / "data" / "reference.safetensors",
            root / "models" / "repository" / "digits_mlp" / "1" / "weights.safetensors"]:
    write("safetensors", src.parent.name + "_" + src.name, src.read_bytes())

pkg = root / "models" / "repository" / "digits_mlp" / "1"
model = (pkg / "model.json").read_bytes()
weights = (pkg / "weights.safetensors").read_bytes()
write("package", "digits_mlp", model + mark + weights)
write("package", "json_only", model)
write("package", "truncated_json", model[: len(model) // 2] + mark + weights)
write("package", "truncated_weights", model + mark + weights[: len(weights) // 3])
j = json.loads(model)
j["graph"]["layers"][0]["in_features"] = 63
write("package", "wrong_width", json.dumps(j).encode() + mark + weights)
j = json.loads(model)
j["format_version"] = 99
write("package", "wrong_version", json.dumps(j).encode() + mark + weights)
j = json.loads(model)
j["inputs"][0]["shape"] = [-1, "64"]
write("package", "shape_string", json.dumps(j).encode() + mark + weights)
write("package", "number_overflow", model.replace(b"64", b"1e999", 1) + mark + weights)

# ONNX: small exports (an MLP at opset 13, a conv net at 17), an op we do not import, and
# broken files (truncated, a byte flipped in the protobuf framing, external data pointing
# outside the model directory).
import io
import torch
# infer: KServe v2 request bodies; "#<N>\n" in front is the Inference-Header-Content-Length.
def infer_body(header, data=b"", length=True):
    h = json.dumps(header).encode()
    return (b"#%d\n" % len(h) if length else b"") + h + data


x_json = {"name": "x", "datatype": "FP32", "shape": [2, 4], "data": [[1, 2, 3, 4], [5, 6, 7, 8]]}
ids_json = {"name": "ids", "datatype": "INT64", "shape": [2], "data": [1, -1]}
x_bin = {"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}
ids_bin = {"name": "ids", "datatype": "INT64", "shape": [1], "parameters": {"binary_data_size": 8}}
four = struct.pack("<4f", 1, 2, 3, 4)
infer_seeds = {
    "json": infer_body({"id": "1", "inputs": [x_json, ids_json], "outputs": [{"name": "y"}]}, length=False),
    "binary": infer_body({"inputs": [x_bin, ids_bin], "parameters": {"binary_data_output": True}},
                         four + struct.pack("<q", 3)),
    "binary_sizes_short": infer_body({"inputs": [x_bin, ids_bin]}, four + b"\0\0\0"),
    "header_beyond_body": b"#999\n" + json.dumps({"inputs": [x_bin]}).encode() + four,
    "raw": b"#0\n" + four,
    "classification": infer_body({"inputs": [x_json, ids_json], "outputs": [
        {"name": "y", "parameters": {"classification": 2}}, {"name": "n", "parameters": {"binary_data": True}}]},
        length=False),
    "bytes_bad_prefix": infer_body({"inputs": [{"name": "s", "datatype": "BYTES", "shape": [2],
                                                "parameters": {"binary_data_size": 9}}]},
                                   struct.pack("<I", 1) + b"a" + struct.pack("<I", 200)),
    "nested_101": infer_body({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": 0}]},
                             length=False).replace(b'"data": 0', b'"data": ' + b"[" * 101 + b"1" + b"]" * 101),
    "deep_body": b"[" * 100000,
    "number_overflow": infer_body({"inputs": [x_json, ids_json]}, length=False).replace(b"8]]", b"1e999]]"),
    "out_of_range": infer_body({"inputs": [{"name": "u", "datatype": "UINT8", "shape": [2], "data": [1, 300]}]},
                               length=False),
    "all_types": infer_body({"inputs": [{"name": t, "datatype": t, "shape": [1],
                                         "data": [True] if t == "BOOL" else ["s"] if t == "BYTES" else [1]}
                                        for t in ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
                                                  "INT32", "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES"]]},
                            length=False),
}
for name, data in infer_seeds.items():
    write("infer", name, data)

# http: what a client sends on a connection (requests back to back), then the reads it arrives
# in: K control bytes and K (fuzz_server_inputs.cpp's read_script). Each seed comes in one read
# and split into small reads with simulated time between them.
def http_req(method, target, headers=(), body=b"", version=b"HTTP/1.1"):
    lines = [b"%s %s %s" % (method, target, version), b"Host: localhost"] + list(headers)
    if body and not any(h.lower().startswith(b"transfer-encoding") for h in headers):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


infer_json = json.dumps({"inputs": [x_json]}).encode()
http_seeds = {
    "ready": http_req(b"GET", b"/v2/health/ready"),
    "infer": http_req(b"POST", b"/v2/models/digits_mlp/versions/1/infer", [b"Content-Type: application/json"], infer_json),
    "infer_binary": http_req(b"POST", b"/v2/models/m/infer", [b"Inference-Header-Content-Length: %d" % len(infer_json)],
                             infer_json + four),
    "pipelined": http_req(b"GET", b"/v2") + http_req(b"GET", b"/v2/models/m/stats") +
                 http_req(b"GET", b"/metrics", [b"Connection: close"]) + http_req(b"GET", b"/v2/health/live"),
    "chunked": http_req(b"POST", b"/v2/models/gpt/generate_stream", [b"Transfer-Encoding: chunked"],
                        b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in [b'{"tex', b't_input": "hi there"}', b""])),
    "percent_encoded": http_req(b"GET", b"/v2/models/a%2Fb/versions/%31/ready?verbose=1#top"),
    "wrong_method": http_req(b"GET", b"/v2/models/m/infer"),
    "repository_load": http_req(b"POST", b"/v2/repository/models/m/load", [b"Authorization: Bearer secret"], b"{}"),
    "expect_continue": http_req(b"POST", b"/v2/repository/index", [b"Expect: 100-continue"], b"{}"),
    "http10": http_req(b"GET", b"/v2/models/m/config", version=b"HTTP/1.0"),
    "bad_version": http_req(b"GET", b"/v2", version=b"HTTP/9.9"),
    "header_no_colon": b"GET /v2 HTTP/1.1\r\nHost localhost\r\n\r\n",
    "body_short": http_req(b"POST", b"/v2/models/m/infer", [b"Content-Length: 100"]) + b"{\"inputs\": []}",
    "body_over_limit": http_req(b"POST", b"/v2/models/m/infer", [b"Content-Length: 67108865"]) + b"{}",
    "bad_chunk_size": http_req(b"POST", b"/v2/models/m/generate", [b"Transfer-Encoding: chunked"], b"zz\r\n{}\r\n0\r\n\r\n"),
    "non_utf8_target": http_req(b"GET", b"/v2/models/\xff\xfe%C3%28/ready"),
    "header_over_limit": http_req(b"GET", b"/v2", [b"X-Pad: " + b"a" * (16 << 10)]),
}
http_seeds["chunk_extension_long"] = http_req(b"POST", b"/v2/models/m/infer", [b"Transfer-Encoding: chunked"],
                                              b"2;" + b"e" * 1100 + b"\r\n{}\r\n0\r\n\r\n")
http_seeds["trailers"] = http_req(b"POST", b"/v2/models/m/infer", [b"Transfer-Encoding: chunked"],
                                  b"2\r\n{}\r\n0\r\n" + b"a: b\r\n" * 40 + b"\r\n")
http_seeds["leading_empty_lines"] = b"\r\n\r\n" + http_req(b"GET", b"/v2/health/live")
http_seeds["content_length_twice"] = http_req(b"POST", b"/v2/models/m/infer", [b"Content-Length: 2", b"Content-Length: 3"]) + b"{}"


def http_reads(data, size, ticks, flags=0):
    pairs = [(size - 1, ticks)] * min(127, (len(data) + size - 1) // size)
    control = bytes([flags]) + bytes(b for p in pairs for b in p)
    return data + control + bytes([len(control)])


for name, data in http_seeds.items():
    write("http", name, data + b"\0")
    write("http", name + "_split", http_reads(data, 7, 1))
# A body trickled below the rate floor (1 KiB/s after 1 s): cut at its deadline.
write("http", "slow_body", http_reads(http_req(b"POST", b"/v2/models/m/infer", [], b"x" * 600), 60, 20, flags=1))
write("http", "small_limits", http_reads(http_req(b"POST", b"/v2/models/m/infer", [], b"x" * 5000), 256, 0, flags=2))

# generate: request bodies of the generate extension.
gen_full = {"id": "7", "text_input": "Once upon a time",
            "parameters": {"max_tokens": 8, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 3,
                           "stop": ["\n", "."], "timeout": 1000, "stream": True}}
generate_seeds = {
    "minimal": {"text_input": "hi"},
    "full": gen_full,
    "stop_string": {"text_input": "a", "parameters": {"stop": "\n", "temperature": 0}},
    "unknown_field": {"text_input": "a", "prompt": "b"},
    "unknown_parameter": {"text_input": "a", "parameters": {"beam_width": 2}},
    "max_tokens_zero": {"text_input": "a", "parameters": {"max_tokens": 0}},
    "max_tokens_huge": {"text_input": "a", "parameters": {"max_tokens": 18446744073709551615}},
    "top_p_above_one": {"text_input": "a", "parameters": {"top_p": 1.5}},
    "seed_negative": {"text_input": "a", "parameters": {"seed": -1}},
    "stop_empty": {"text_input": "a", "parameters": {"stop": ["x", ""]}},
    "temperature_string": {"text_input": "a", "parameters": {"temperature": "hot"}},
    "empty_text": {"text_input": ""},
    "not_object": ["text_input", "hi"],
}
for name, body in generate_seeds.items():
    write("generate", name, json.dumps(body).encode())
write("generate", "deep", b'{"text_input": "a", "parameters": {"stop": ' + b"[" * 9 + b"]" * 9 + b"}}")
write("generate", "number_overflow", json.dumps(gen_full).replace("0.7", "1e999").encode())
write("generate", "truncated", json.dumps(gen_full).encode()[:40])

# config: a model folder's config.json (the folder is named "fuzz").
tensor = lambda name, dims, t="TYPE_FP32": {"name": name, "data_type": t, "dims": dims}
config_seeds = {
    "triton": {"name": "fuzz", "platform": "onnxruntime_onnx", "max_batch_size": 32, "batch_buckets": "exp:1:32",
               "dynamic_batching": {"max_queue_delay_microseconds": 200, "preserve_ordering": True,
                                    "priority_levels": 2, "default_priority_level": 2,
                                    "default_queue_policy": {"max_queue_size": 256,
                                                             "default_timeout_microseconds": "50000",
                                                             "allow_timeout_override": True,
                                                             "timeout_action": "REJECT"}},
               "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
               "version_policy": {"latest": {"num_versions": 2}}, "model_warmup": False,
               "input": [tensor("x", [64])], "output": [tensor("y", [10])]},
    "identity": {"platform": "identity", "max_batch_size": 0,
                 "inputs": [{"name": "a", "datatype": "BYTES", "shape": [2, -1]}],
                 "outputs": [{"name": "b", "datatype": "BYTES", "shape": [2, -1]}]},
    "buckets_list": {"batch_buckets": [1, 2, 4, 8], "version_policy": {"specific": {"versions": [3, 1, 3]}}},
    "linear_buckets": {"backend": "hgraph", "batch_buckets": "linear:8:64:8", "version_policy": {"all": {}}},
    "empty_object": {},
    "name_mismatch": {"name": "other"},
    "unknown_field": {"sequence_batching": {}},
    "priority_above_levels": {"dynamic_batching": {"priority_levels": 2, "default_priority_level": 3}},
    "bucket_above_max": {"max_batch_size": 4, "batch_buckets": [1, 8]},
    "dims_zero": {"input": [tensor("x", [0])]},
    "unknown_type": {"input": [tensor("x", [1], "TYPE_FP128")]},
    "dims_and_shape": {"input": [{"name": "x", "datatype": "FP32", "dims": [1], "shape": [-1, 1]}]},
    "too_many_instances": {"instance_group": [{"count": 40}, {"count": 40}]},
    "identity_unpaired": {"platform": "identity", "input": [tensor("x", [1])]},
    "not_object": [1, 2],
}
for name, cfg in config_seeds.items():
    write("config", name, json.dumps(cfg).encode())
write("config", "number_overflow", json.dumps(config_seeds["triton"]).replace('"max_batch_size": 32', '"max_batch_size": 1e999').encode())
write("config", "truncated", json.dumps(config_seeds["triton"]).encode()[:100])
write("config", "empty", b"")


# checkpoint: trainer checkpoints (safetensors with the checkpoint JSON in the metadata).
def ckpt(meta, tensors, fmt="hgraph-checkpoint", version="1", meta_text=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": fmt, "format_version": version,
                              "checkpoint": meta_text if meta_text is not None else json.dumps(meta)}
    return st(header, data)


ck_meta = {"epoch": 3, "global_step": 42, "loops": {"next_epoch": 4, "next_batch": 0, "total_batch_idx": 42},
           "weights_only": False, "state_dict": ["0.weight", "0.bias"],
           "optimizer_states": [{"json": {"param_groups": [{"lr": 0.1, "params": ["0.weight", "0.bias"]}], "state": {}},
                                 "tensors": ["0.weight.momentum_buffer"]}],
           "lr_schedulers": [{"name": "StepLR", "last_epoch": 3}], "callbacks": {"EarlyStopping": {"wait": 1}},
           "hyper_parameters": {"hidden": 16}, "precision": "32-true", "module": {},
           "rng": {"hpu": {"seed": 0, "offset": 0}}, "hgraph_version": "0.1.0"}
ck_tensors = {"state_dict/0.weight": ("F32", [2, 3], f32(6)), "state_dict/0.bias": ("F32", [2], f32(2)),
              "optimizer_states/0/0.weight.momentum_buffer": ("F32", [2, 3], f32(6))}


def ck_edit(change):
    m = json.loads(json.dumps(ck_meta))
    change(m)
    return m


weights_only = ck_edit(lambda m: m.update(weights_only=True, loops={}, optimizer_states=[]))
valid_ckpt = ckpt(ck_meta, ck_tensors)
checkpoint_seeds = {
    "valid": valid_ckpt,
    "weights_only": ckpt(weights_only, {k: v for k, v in ck_tensors.items() if k.startswith("state_dict/")}),
    "bf16_and_i64": ckpt(ck_edit(lambda m: m.update(state_dict=["w", "steps"], optimizer_states=[])),
                         {"state_dict/w": ("BF16", [2], b"\x80\x3f" * 2), "state_dict/steps": ("I64", [1], struct.pack("<q", 9))}),
    "missing_global_step": ckpt(ck_edit(lambda m: m.pop("global_step")), ck_tensors),
    "epoch_string": ckpt(ck_edit(lambda m: m.update(epoch="three")), ck_tensors),
    "epoch_negative": ckpt(ck_edit(lambda m: m.update(epoch=-1)), ck_tensors),
    "loops_incomplete": ckpt(ck_edit(lambda m: m["loops"].pop("next_batch")), ck_tensors),
    "tensor_not_in_file": ckpt(ck_edit(lambda m: m["state_dict"].append("1.weight")), ck_tensors),
    "tensor_listed_twice": ckpt(ck_edit(lambda m: m["state_dict"].append("0.bias")), ck_tensors),
    "tensor_not_listed": ckpt(ck_edit(lambda m: m["optimizer_states"][0].update(tensors=[])), ck_tensors),
    "optimizer_not_object": ckpt(ck_edit(lambda m: m.update(optimizer_states=[5])), ck_tensors),
    "format_version_9": ckpt(ck_meta, ck_tensors, version="9"),
    "other_format": ckpt(ck_meta, ck_tensors, fmt="pytorch-lightning"),
    "json_truncated": ckpt(ck_meta, ck_tensors, meta_text=json.dumps(ck_meta)[:50]),
    "json_number_overflow": ckpt(ck_meta, ck_tensors, meta_text=json.dumps(ck_meta).replace("0.1", "1e999")),
    "no_metadata": st({"state_dict/w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32(1)),
    "truncated": valid_ckpt[: len(valid_ckpt) * 2 // 3],
}
for name, data in checkpoint_seeds.items():
    write("checkpoint", name, data)


# graph_cache: disk graph-cache entries without their checksum (the target appends it), with
# the fuzz header (fuzz/fuzz_inputs.h). Layout in graphs/graph_serialize.h.
def gstr(text):
    b = text.encode()
    return struct.pack("<I", len(b)) + b


def gmeta(shape, dtype=0):  # dtype codes: hg::DType (0 F32, 1 I64, ...)
    return struct.pack("<BI", dtype, len(shape)) + b"".join(struct.pack("<q", d) for d in shape)


def ginput(index, shape, frozen=False):
    return struct.pack("<BBi", 0, 1 if frozen else 0, index) + gmeta(shape)


def gop(op, inputs, shape, ints=(), floats=(), fused=(), constant=False):
    return (struct.pack("<BB", 1, 2 if constant else 0) + gstr(op) +
            struct.pack("<I", len(inputs)) + b"".join(struct.pack("<i", i) for i in inputs) +
            struct.pack("<I", len(ints)) + b"".join(struct.pack("<q", v) for v in ints) +
            struct.pack("<I", len(floats)) + b"".join(struct.pack("<d", v) for v in floats) +
            struct.pack("<I", len(fused)) + b"".join(gstr(f) for f in fused) + gmeta(shape))


def ggraph(nodes, num_inputs, outputs):
    return (struct.pack("<II", len(nodes), num_inputs) + b"".join(nodes) +
            struct.pack("<I", len(outputs)) + b"".join(struct.pack("<i", o) for o in outputs))


def gentry(payload, engine="fuzz-engine", isa="fuzz-isa", key="fuzz-key", version=2, length=None):
    head = b"HGGRAPH\0" + struct.pack("<I", version) + gstr(engine) + gstr(isa) + gstr(key)
    pad = (64 - (len(head) + 4 + 8) % 64) % 64  # the payload starts 64-byte aligned
    return (head + struct.pack("<I", pad) + b"\0" * pad +
            struct.pack("<Q", len(payload) if length is None else length) + payload)


mlp_nodes = [ginput(0, [2, 8]), ginput(1, [4, 8], frozen=True), ginput(2, [4], frozen=True),
             gop("linear", [0, 1, 2], [2, 4], ints=[0]), gop("relu", [3], [2, 4], fused=["linear", "relu"])]
mlp_graph = ggraph(mlp_nodes, 3, [4])
graph_seeds = {
    "mlp": gentry(mlp_graph),
    "shapes": gentry(ggraph([ginput(0, [2, 8]), gop("reshape", [0], [4, 4], ints=[4, 4]),
                             gop("softmax", [1], [4, 4], ints=[-1]), gop("concat", [1, 2], [8, 4], ints=[0])], 1, [3, 2])),
    "constant_op": gentry(ggraph([ginput(0, [3], frozen=True), gop("relu", [0], [3], constant=True)], 1, [1])),
    "unknown_op": gentry(ggraph([ginput(0, [2]), gop("no_such_op", [0], [2])], 1, [1])),
    "forward_input": gentry(ggraph([ginput(0, [2]), gop("relu", [1], [2])], 1, [1])),
    "meta_mismatch": gentry(ggraph([ginput(0, [2, 8]), gop("relu", [0], [8, 2])], 1, [1])),
    "rank_17": gentry(ggraph([ginput(0, [1] * 17)], 1, [0])),
    "dtype_code_9": gentry(ggraph([ginput(0, [2])], 1, [0]).replace(gmeta([2]), gmeta([2], dtype=9))),
    "reshape_overflow": gentry(ggraph([ginput(0, [1]), gop("reshape", [0], [1], ints=[1 << 32, 1 << 32, 0])], 1, [1])),
    "no_outputs": gentry(ggraph([ginput(0, [2])], 1, [])),
    "trailing_bytes": gentry(mlp_graph + b"\0"),
    "payload_length_off": gentry(mlp_graph, length=len(mlp_graph) + 1),
    "other_engine": gentry(mlp_graph, engine="hgraph 0.0.1 graph-format 1"),
    "format_version_3": gentry(mlp_graph, version=3),
    "bad_magic": b"HGGRAPX\0" + gentry(mlp_graph)[8:],
    "truncated": gentry(mlp_graph)[:60],
}
for name, data in graph_seeds.items():
    write("graph_cache", name, data)

# One entry per op the engine registers (found in its register_op calls): inputs F32[2, 8] and
# no attributes, whatever the op wants, so that mutations start from every op's shape inference.
ops = sorted({m for f in sorted((root / "engine").glob("*.cpp")) + sorted((root / "graphs").glob("*.cpp"))
              for m in re.findall(r'\{"([a-z0-9_]+)", (-?\d+), infer_', f.read_text())})
for op, arity in ops:
    n = 2 if int(arity) < 0 else int(arity)
    write("graph_cache", "op_" + op, gentry(ggraph([ginput(i, [2, 8]) for i in range(n)] + [gop(op, list(range(n)), [2, 8])], n, [n])))

import onnx
from onnx import helper, TensorProto


def export(model, x, opset):
    buf = io.BytesIO()
    torch.onnx.export(model.eval(), x, buf, opset_version=opset, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    return buf.getvalue()


torch.manual_seed(0)
mlp = export(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)), torch.randn(2, 8), 13)
conv = export(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.ReLU(),
                                  torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(2, 3)),
              torch.randn(1, 1, 8, 8), 17)
write("onnx", "mlp_opset13.onnx", mlp)
write("onnx", "conv_opset17.onnx", conv)
write("onnx", "truncated.onnx", mlp[: len(mlp) // 2])
flipped = bytearray(conv)
flipped[len(flipped) // 3] ^= 0xFF
write("onnx", "flipped_byte.onnx", bytes(flipped))
node = helper.make_node("NonMaxSuppression", ["x", "s"], ["y"], name="nms0")
g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4]),
                                    helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.INT64, [None, 3])])
write("onnx", "unsupported_op.onnx", helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.0] * 16)
w.data_location = TensorProto.EXTERNAL
for k, v in (("location", "../../etc/passwd"), ("offset", "0"), ("length", "64")):
    e = w.external_data.add()
    e.key, e.value = k, v
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], initializer=[w])
write("onnx", "external_outside.onnx", helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
print("seed corpora in", corpus)
