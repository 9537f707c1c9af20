#!/usr/bin/env python3
"""Writes the data-file fixtures of tests/data_files_test.cpp with NumPy (and Python's gzip and
zipfile), so the readers are checked against files the reference tools wrote:

  tests/data/tables/rows.npy        float64 [5, 4], label in the last column
  tests/data/tables/rows_f.npy      the same, Fortran order, big-endian float32
  tests/data/tables/xy.npz          np.savez: x float32 [5, 3], y int64 [5]
  tests/data/tables/xy_deflate.npz  np.savez_compressed, x int16 [5, 3], y uint8 [5]
  tests/data/tables/iris_head.csv   a header, quoted fields, text labels, CRLF line ends
  tests/data/tables/tiny-idx3.gz    IDX ubyte [3, 2, 2] (gzip), tiny-idx1 ubyte [3] (raw),
  tests/data/tables/floats-idx2     IDX float [2, 3] (big-endian), shorts-idx1 short [3]
  tests/data/tables/expected.json   what each holds, as the C++ test reads it back

Run with Debian's python3 (numpy): /usr/bin/python3 scripts/golden_data_files.py
"""
import gzip, json, os, struct, sys
import numpy as np

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tables")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
exp = {}

rows = np.concatenate([rng.normal(size=(5, 3)).round(3), np.array([[2], [0], [1], [2], [0]])], axis=1)
np.save(os.path.join(out, "rows.npy"), rows)
np.save(os.path.join(out, "rows_f.npy"), np.asfortranarray(rows.astype(">f4")))
exp["rows"] = {"x": rows[:, :3].tolist(), "y": rows[:, 3].astype(int).tolist()}

x = rng.normal(size=(5, 3)).astype(np.float32)
y = np.array([1, 0, 3, 3, 1], dtype=np.int64)
np.savez(os.path.join(out, "xy.npz"), x=x, y=y)
exp["xy"] = {"x": x.astype(float).tolist(), "y": y.tolist(),
            "mean": x.astype(np.float64).mean(0).tolist(), "std": x.astype(np.float64).std(0).tolist()}
xi = rng.integers(-300, 300, size=(5, 3)).astype(np.int16)
yu = np.array([4, 4, 0, 2, 1], dtype=np.uint8)
np.savez_compressed(os.path.join(out, "xy_deflate.npz"), x=xi, y=yu)
exp["xy_deflate"] = {"x": xi.astype(float).tolist(), "y": yu.astype(int).tolist()}

csv = ('sepal_length,sepal_width,"petal, length",species\r\n'
       '5.1,3.5,1.4,setosa\r\n'
       '7.0,3.2,4.7,versicolor\r\n'
       '\r\n'
       '6.3,+3.3,6.0,"virginica"\r\n'
       '4.9,3.0,1.4,setosa\r\n')
open(os.path.join(out, "iris_head.csv"), "w", newline="").write(csv)
exp["iris_head"] = {"x": [[5.1, 3.5, 1.4], [7.0, 3.2, 4.7], [6.3, 3.3, 6.0], [4.9, 3.0, 1.4]],
                    "y": [0, 1, 2, 0], "classes": ["setosa", "versicolor", "virginica"],
                    "features": ["sepal_length", "sepal_width", "petal, length"]}

def idx(arr, code):
    head = struct.pack(">BBBB", 0, 0, code, arr.ndim) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return head + arr.tobytes()

img = rng.integers(0, 256, size=(3, 2, 2)).astype(np.uint8)
lab = np.array([9, 0, 3], dtype=np.uint8)
with gzip.open(os.path.join(out, "tiny-idx3.gz"), "wb") as f:
    f.write(idx(img, 0x08))
open(os.path.join(out, "tiny-idx1"), "wb").write(idx(lab, 0x08))
fl = rng.normal(size=(2, 3)).astype(">f4")
open(os.path.join(out, "floats-idx2"), "wb").write(idx(fl, 0x0D))
sh = np.array([-2, 300, -32768], dtype=">i2")
open(os.path.join(out, "shorts-idx1"), "wb").write(idx(sh, 0x0B))
exp["idx"] = {"images": img.astype(int).tolist(), "labels": lab.astype(int).tolist(),
              "floats": fl.astype(float).tolist(), "shorts": sh.astype(int).tolist()}

json.dump(exp, open(os.path.join(out, "expected.json"), "w"), indent=1)
print("wrote", out)
