#!/usr/bin/env python3
"""The model-size study of the built-in poetry model: validation loss of each run against the
training tokens and against the training compute, from the runs' `metrics.jsonl`.

    PEERS_PYTHON scripts/plot_size_study.py OUT.png NAME=RUN_DIR:MACS_PER_TOKEN ...

MACS_PER_TOKEN is the forward multiply-adds per training token of that size (the model card
gives the formula); compute is 3 x MACS x tokens (forward and backward). Each run's validation
losses are the `"event": "eval"` lines; tokens = step x the tokens per step of its `run.json`
(batch x seq-len x grad-accum). Needs matplotlib.
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def curve(run: Path):
    args = json.loads((run / "run.json").read_text())
    per_step = args["batch"] * args["seq_len"] * args.get("grad_accum", 1)
    points = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "eval":
            points.append((record["step"] * per_step, record["loss"]))
    return points


def main():
    out = sys.argv[1]
    fig, (by_tokens, by_compute) = plt.subplots(1, 2, figsize=(11, 4.2))
    for spec in sys.argv[2:]:
        name, rest = spec.split("=", 1)
        run, macs = rest.rsplit(":", 1)
        points = curve(Path(run))
        tokens = [t / 1e6 for t, _ in points]
        losses = [l for _, l in points]
        compute = [3 * float(macs) * t / 1e15 for t, _ in points]
        by_tokens.plot(tokens, losses, marker=".", label=name)
        by_compute.plot(compute, losses, marker=".", label=name)
    by_tokens.set_xlabel("training tokens (millions)")
    by_compute.set_xlabel("training compute (10^15 multiply-adds)")
    for ax in (by_tokens, by_compute):
        ax.set_ylabel("validation loss (nats)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Built-in poetry model: sizes at the same compute (each its own schedule)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
