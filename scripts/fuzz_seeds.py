#!/usr/bin/env python3
"""Writes the seed corpora for hgraph-fuzz (fuzz/corpus/<target>/): valid files from the repo
and hand-made broken ones (header length beyond the file, overlapping or out-of-range offsets,
dtype/shape mismatch, truncated JSON). Run from anywhere: /usr/bin/python3 scripts/fuzz_seeds.py"""
import json
import pathlib
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
