#!/usr/bin/env python3
"""Plots held-out masked-LM loss and top-1 against training tokens for the runs of
`continue_in_pytorch.py --eval-blocks` (their JSON-lines logs, "eval" events).

    ~/.cache/roformer-peers/venv/bin/python scripts/plot_gpu_scaling.py OUT.png NAME=LOG.jsonl ...

A run that continued from earlier weights is given as NAME=LOG.jsonl@M: its tokens are
counted from M million (the tokens its starting weights had seen).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def evals(path):
    rows = []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line.startswith("{") and '"event": "eval"' in line:
            rows.append(json.loads(line))
    return rows


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    fig, (loss_ax, top1_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for spec in sys.argv[2:]:
        name, path = spec.split("=", 1)
        path, _, offset = path.partition("@")
        rows = evals(path)
        tokens = [float(offset or 0) + r["tokens"] / 1e6 for r in rows]
        loss_ax.plot(tokens, [r["loss"] for r in rows], marker="o", label=name)
        top1_ax.plot(tokens, [100 * r["top1"] for r in rows], marker="o", label=name)
    loss_ax.set(xlabel="training tokens (M)", ylabel="held-out masked-LM loss")
    top1_ax.set(xlabel="training tokens (M)", ylabel="held-out top-1 of masked tokens (%)")
    for ax in (loss_ax, top1_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=100)


if __name__ == "__main__":
    main()
