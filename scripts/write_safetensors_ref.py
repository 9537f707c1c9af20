#!/usr/bin/python3
"""Writes tests/data/reference.safetensors, an independently produced reference file.

Usage: /usr/bin/python3 scripts/write_safetensors_ref.py [output_path]

Uses only struct, json and numpy (not hgraph's writer), with a layout that differs from
hgraph's own writer on purpose: header keys sorted by name, data laid out in a different
order, "__metadata__" last, JSON with spaces and \\u escapes, header padded with spaces to
a multiple of 8 bytes. tests/safetensors_test.cpp checks every value listed here.
"""
import json
import os
import struct
import sys

import numpy as np

# name -> (safetensors dtype, numpy array); the data section is laid out in LAYOUT order.
TENSORS = {
    "weight_f32": ("F32", np.array([[0.5, -1.25, 2.0], [3.75, -0.0625, 1.0e6]], dtype="<f4")),
    "ids_i64": ("I64", np.array([0, -1, 2**40, -(2**62)], dtype="<i8")),
    "pixels_u8": ("U8", np.array([0, 1, 127, 128, 255], dtype="u1")),
    "matrix_f64": ("F64", np.array([[3.141592653589793, -2.5], [1e-300, 1e300]], dtype="<f8")),
    "counts_i32": ("I32", np.array([-2147483648, 7, 2147483647], dtype="<i4")),
    "half_f16": ("F16", np.array([1.0, -0.5, 65504.0], dtype="<f2")),
    "mask_bool": ("BOOL", np.array([True, False, True], dtype="u1")),
    "scalar_f32": ("F32", np.array(42.0, dtype="<f4")),
    "empty_f32": ("F32", np.zeros((0, 3), dtype="<f4")),
}
LAYOUT = ["pixels_u8", "matrix_f64", "weight_f32", "mask_bool", "ids_i64", "half_f16",
          "empty_f32", "counts_i32", "scalar_f32"]
METADATA = {"format": "pt", "producer": "write_safetensors_ref.py", "note": "\u00fcnic\u00f8de \u2713"}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "reference.safetensors")
    header, chunks, offset = {}, [], 0
    for name in LAYOUT:
        dtype, arr = TENSORS[name]
        raw = arr.tobytes(order="C")
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(dict(sorted(header.items())), ensure_ascii=True)
    text = text[:-1] + ', "__metadata__": ' + json.dumps(METADATA, ensure_ascii=True) + "}"
    blob = text.encode("ascii")
    blob += b" " * (-len(blob) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for raw in chunks:
            f.write(raw)
    print(f"wrote {out}: header {len(blob)} bytes, data {offset} bytes")


if __name__ == "__main__":
    main()
