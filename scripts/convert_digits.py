#!/usr/bin/python3
"""Converts scikit-learn's bundled digits data set to models/data/digits.safetensors.

Usage: /usr/bin/python3 scripts/convert_digits.py [output_path]

Reads sklearn/datasets/data/digits.csv.gz (1,797 rows of 64 pixel values 0..16 followed
by the label 0..9) from the installed scikit-learn (Debian's python3-sklearn) and writes
two U8 tensors, `images` [1797, 64] and `labels` [1797], in the safetensors format using
only the standard library, so the file does not depend on hgraph's own writer.
"""
import csv
import gzip
import json
import os
import struct
import sys

import sklearn.datasets

ROWS, PIXELS = 1797, 64


def load_digits_csv():
    path = os.path.join(os.path.dirname(sklearn.datasets.__file__), "data", "digits.csv.gz")
    images, labels = bytearray(), bytearray()
    with gzip.open(path, "rt") as f:
        for lineno, row in enumerate(csv.reader(f), 1):
            if not row:
                continue
            values = [int(float(v)) for v in row]
            if len(values) != PIXELS + 1:
                sys.exit(f"{path}:{lineno}: expected {PIXELS + 1} values, got {len(values)}")
            if not all(0 <= v <= 16 for v in values[:PIXELS]) or not 0 <= values[PIXELS] <= 9:
                sys.exit(f"{path}:{lineno}: value out of range")
            images.extend(values[:PIXELS])
            labels.append(values[PIXELS])
    if len(labels) != ROWS:
        sys.exit(f"{path}: expected {ROWS} rows, got {len(labels)}")
    return bytes(images), bytes(labels)


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in the order given."""
    header = {"__metadata__": metadata}
    offset = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)  # data section starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)
    os.replace(tmp, path)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "models", "data", "digits.safetensors")
    images, labels = load_digits_csv()
    write_safetensors(
        out,
        [("images", "U8", [ROWS, PIXELS], images), ("labels", "U8", [ROWS], labels)],
        {"source": "scikit-learn digits.csv.gz", "license": "BSD-3-Clause"},
    )
    print(f"wrote {out}: {ROWS} images, label counts {[labels.count(d) for d in range(10)]}")


if __name__ == "__main__":
    main()
