#!/usr/bin/python3
"""Golden values for what the callbacks and loggers write the way Python / Lightning do:
float repr and str.format specs (checkpoint names), PyYAML's dump (hparams.yaml), the csv
module's rows (metrics.csv) and Lightning's ModelCheckpoint file names.

Usage: /usr/bin/python3 scripts/golden_loggers.py   (needs python3-yaml)

Writes tests/golden/loggers.json:
  repr: [[value, repr(value)]], format: [[value, is_int, spec, format(value, spec)]],
  yaml: [[hparams, yaml.dump(hparams)]], csv: {keys, rows, text} (csv.DictWriter, Python's
  defaults), checkpoint_names: [[filename, metrics, auto_insert_metric_name, name]].
Lightning is not installed here: checkpoint_name() restates ModelCheckpoint._format_checkpoint_name
(pytorch-lightning src/lightning/pytorch/callbacks/model_checkpoint.py) with a dict of floats /
ints in place of tensors; the formatting itself is Python's str.format.
"""
import csv
import io
import json
import os
import re

import yaml

REPR = [0.1, 1e-05, 1.5e-5, 100000.0, 1e16, 1.2345678901234567e20, 0.0001, 123.456, 2.0 / 3, -0.0, 1e22,
        5e-324, 0.12, -3.25, 1e-4, 9.999999999999999e15, 0.30000000000000004]
FORMAT = [(0.12345, False, ".2f"), (7, True, "03d"), (0.5, False, ""), (3, True, ""), (0.000123, False, ".3"),
          (12.0, False, "+.1e"), (3.14159, False, ">10.3f"), (0.5, False, ".1%"), (1234.5678, False, ".4g"),
          (-2.5, False, "08.2f"), (42, True, "<5d"), (2.0, False, ".0"), (0.1, False, "*^9.2f"),
          (1e-7, False, "g"), (5, True, ".2f")]
YAML = [
    {"lr": 1e-05, "batch_size": 32, "layers": [64, 64, 10], "name": "mlp", "opt": {"beta": 0.9, "nesterov": True}},
    {"b": {"c": 2, "d": [1, 2, {"x": 1, "y": "yes"}]}, "l": [[1, 2], [3]], "e": [], "f": {}, "s": "hello world",
     "q": "it's: x", "n": None, "t": True, "i": 100000.0, "neg": -7, "path": "runs/a-b_c.d"},
]
CSV_KEYS = ["epoch", "lr-SGD", "step", "train_loss", "val,acc"]
CSV_ROWS = [{"lr-SGD": 0.1, "step": 0}, {"train_loss": 2.25, "epoch": 0, "step": 49},
            {"val,acc": 0.5, "epoch": 0, "step": 49}, {"train_loss": 1.0 / 3, "step": 99}]
CHECKPOINTS = [
    ("", {"epoch": 3, "step": 120, "val_loss": 0.25}, True),
    ("{epoch}-{val_loss:.2f}", {"epoch": 3, "step": 120, "val_loss": 0.123456}, True),
    ("{epoch}-{val_loss:.2f}", {"epoch": 3, "step": 120, "val_loss": 0.123456}, False),
    ("model-{epoch:02d}-{val/acc:.3f}", {"epoch": 7, "step": 8, "val/acc": 0.5}, True),
    ("{step}-{missing}", {"epoch": 0, "step": 5}, True),
    ("{val_loss}-{val_loss_ema}", {"epoch": 0, "step": 5, "val_loss": 0.1, "val_loss_ema": 0.2}, True),
    ("last", {"epoch": 1, "step": 2}, True),
]


def checkpoint_name(filename, metrics, auto_insert_metric_name):
    metrics = dict(metrics)
    if not filename:
        filename = "{epoch}" + "-" + "{step}"
    groups = re.findall(r"(\{.*?)[:\}]", filename)
    groups = sorted(groups, key=lambda x: len(x), reverse=True)
    for group in groups:
        name = group[1:]
        if auto_insert_metric_name:
            filename = filename.replace(group, name + "=" + "{" + name)
        filename = filename.replace(group, f"{{0[{name}]")
        if name not in metrics:
            metrics[name] = 0
    return filename.format(metrics) + ".ckpt"


def main():
    out = {
        "repr": [[v, repr(v)] for v in REPR],
        "format": [[v, is_int, spec, format(int(v) if is_int else v, spec)] for v, is_int, spec in FORMAT],
        "yaml": [[h, yaml.dump(h)] for h in YAML],
    }
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=CSV_KEYS)
    writer.writeheader()
    writer.writerows(CSV_ROWS)
    out["csv"] = {"keys": CSV_KEYS, "rows": CSV_ROWS, "text": text.getvalue()}
    out["checkpoint_names"] = [[f, m, a, checkpoint_name(f, m, a)] for f, m, a in CHECKPOINTS]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "loggers.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
