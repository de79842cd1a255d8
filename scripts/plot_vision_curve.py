#!/usr/bin/env python3
"""Draws a Fashion-MNIST ViT training curve from the JSON lines of `train_vit_pytorch.py`:
the training loss per epoch (left axis) and the validation top-1 at 28x28 (right axis).

    ~/.cache/roformer-peers/venv/bin/python scripts/plot_vision_curve.py OUT.png LOG.jsonl
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out, log = sys.argv[1], sys.argv[2]
    epochs, losses, val_epochs, val = [], [], [], []
    with open(log) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if row.get("event") != "epoch":
                continue
            epochs.append(row["epoch"])
            losses.append(row["loss"])
            if "val_acc_28" in row:
                val_epochs.append(row["epoch"])
                val.append(100 * row["val_acc_28"])
    if not epochs:
        sys.exit(f"{log}: no epoch lines")
    fig, left = plt.subplots(figsize=(7, 4), dpi=110)
    left.plot(epochs, losses, color="tab:blue", label="training loss (label smoothing 0.1)")
    left.set_xlabel("epoch")
    left.set_ylabel("training loss", color="tab:blue")
    right = left.twinx()
    right.plot(val_epochs, val, "o-", color="tab:red", label="validation top-1, 28x28")
    right.set_ylabel("validation top-1 (%)", color="tab:red")
    left.set_title("Fashion-MNIST ViT (2D RoPE): training curve")
    left.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    main()
