"""Reads a .safetensors file (u64 header length, JSON header, raw data) into numpy arrays, for the
benchmark and coverage scripts: read(path) -> {name: array}, the header's offsets checked."""
import json
import struct

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_}


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data, out = blob[8 + n:], {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        if not 0 <= a <= b <= len(data):
            raise ValueError(f"{path}: tensor {name}: offsets {a}..{b} outside the data section")
        out[name] = np.frombuffer(data[a:b], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
    return out
