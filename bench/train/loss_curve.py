#!/usr/bin/python3
"""The digits loss-curve plot of the training benchmark (bench/train/run_train.sh).

Usage: /usr/bin/python3 bench/train/loss_curve.py OUT.png LABEL=METRICS.csv [LABEL=METRICS.csv ...]

Each CSV has a header row; the x axis is its "epoch" column, the curves are "train_loss" and
"val_loss" (solid / dashed, one colour per run) and, on a second axis, "val_acc" when present.
Works on hg_train_bench's / torch_train.py's `digits` CSVs and on the CSVLogger's
lightning_logs/version_N/metrics.csv (rows without a value in a column are skipped, and a
metric logged per step and per epoch is taken from its "_epoch" column when it has one).
Environment: LOSS_CURVE_X ("epoch" or "step"), LOSS_CURVE_TITLE, LOSS_CURVE_ACC_MIN (0.8).
"""
import csv
import os
import sys


X = os.environ.get("LOSS_CURVE_X", "epoch")


def column(rows, names):
    """(x, values) of the first of `names` that the rows have, skipping empty cells; x is the
    LOSS_CURVE_X column (default "epoch", or "step")."""
    for name in names:
        pts = [(float(r[X]), float(r[name])) for r in rows if r.get(name) not in (None, "")]
        if pts:
            # several rows per x (per-step logging against epochs): keep the last value of each
            last = {}
            for e, v in pts:
                last[e] = v
            xs = sorted(last)
            return xs, [last[e] for e in xs]
    return [], []


def main():
    if len(sys.argv) < 3 or any("=" not in a for a in sys.argv[2:]):
        sys.exit(__doc__)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax2 = ax.twinx()
    for i, arg in enumerate(sys.argv[2:]):
        label, path = arg.split("=", 1)
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        color = f"C{i}"
        # the first run wide and pale underneath: runs that coincide stay visible
        width, alpha = (4.5, 0.45) if i == 0 else (1.3, 1.0)
        for names, style, what in ((["train_loss_epoch", "train_loss"], "-", "train loss"),
                                   (["val_loss"], "--", "val loss")):
            xs, ys = column(rows, names)
            if xs:
                ax.plot(xs, ys, style, color=color, lw=width, alpha=alpha, label=f"{label} {what}")
        xs, ys = column(rows, ["val_acc"])
        if xs:
            ax2.plot(xs, ys, ":", color=color, lw=width, alpha=alpha, label=f"{label} val acc")
    ax.set_xlabel(X)
    ax.set_ylabel("cross-entropy loss")
    ax.set_yscale("log")
    ax2.set_ylabel("validation accuracy")
    ax2.set_ylim(float(os.environ.get("LOSS_CURVE_ACC_MIN", "0.8")), 1.0)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    fig.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="lower center", ncol=3)
    ax.set_title(os.environ.get("LOSS_CURVE_TITLE", "Digits MLP 64-64-10: SGD lr 0.1, momentum 0.9, batch 32"), fontsize=10)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.savefig(sys.argv[1] + ".tmp.png", dpi=110)
    os.replace(sys.argv[1] + ".tmp.png", sys.argv[1])
    print("wrote", sys.argv[1])


if __name__ == "__main__":
    main()
