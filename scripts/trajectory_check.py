#!/usr/bin/env python3
"""Issue 20, part 1, in one command: is our training of each arm PyTorch's, step by step?

For the rotary arm (transformers' `RoFormerForMaskedLM`) and the absolute arm
(`BertForMaskedLM`) of `roformer experiment convergence`, at two peak learning rates, it
dumps the first `--steps` steps of a `train mlm` run with the experiment's model, data and
schedule (`--dump-steps N --stop-after N` of a `--total`-step run, seed 0), trains the same
model in PyTorch from the dumped weights on the dumped batches
(`scripts/compare_trajectory.py`), and writes into `--out`:

- `results.json`: per run the largest relative loss difference over the first
  `--strict-steps` steps (the issue's bound: 1e-3) and over all, the same for the gradient
  norms before clipping, the largest absolute loss difference after the strict steps against
  the curve's own step-to-step noise, the verdict, and the wall times;
- `trajectory.png`: the 2x2 figure (arms x rates), both loss curves and the relative
  difference;
- `section.md`: the table and the verdict for EXPERIMENTS.md.

The runs (dumps, checkpoints, comparisons) go to `--out/runs/`, which is not committed. A run
whose dump and comparison are there is not redone.

    ~/.cache/roformer-peers/venv/bin/python scripts/trajectory_check.py \\
        [--out experiments/trajectory] [--steps 200] [--total 500] [--lrs 3e-3,1e-3]

Needs a build of the CLI (`BIN`, default target/release/roformer), the corpus
(scripts/fetch_chinese_poetry.sh) and torch, transformers, safetensors and matplotlib (the
peers' virtualenv).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARMS = {"rotary": "RoFormerForMaskedLM", "absolute": "BertForMaskedLM"}

# The convergence experiment's model (crates/roformer-experiments/src/pretrain.rs,
# write_config, with the sizes of experiments/convergence/settings.json), softmax attention.
CONFIG = {
    "architectures": ["RoFormerForMaskedLM"], "model_type": "roformer", "vocab_size": 5000,
    "embedding_size": 128, "hidden_size": 128, "num_hidden_layers": 3,
    "num_attention_heads": 4, "intermediate_size": 512, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
    "layer_norm_eps": 1e-12, "pad_token_id": 0, "tie_word_embeddings": True,
    "attention_type": "softmax",
}


def run(cmd, log):
    """Runs `cmd`, its output to `log`; exits with the log's tail when it fails."""
    with open(log, "w") as f:
        code = subprocess.call([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT)
    if code != 0:
        tail = Path(log).read_text()[-2000:]
        raise SystemExit(f"{' '.join(map(str, cmd[:3]))} failed ({code}), {log}:\n{tail}")


def inputs(args, runs):
    """The experiment's vocabulary (5000 characters of the corpus) and config, in `runs`."""
    vocab, config = runs / "vocab.txt", runs / "config.json"
    if not vocab.is_file():
        run([args.bin, "vocab", "build", "--corpus", args.corpus, "--size", 5000,
             "--out", vocab], runs / "vocab.log")
    config.write_text(json.dumps(CONFIG, indent=1) + "\n")
    return vocab, config


def dumped(dump, steps):
    """Whether `dump` holds a finished dump of `steps` steps."""
    path = dump / "run.json"
    return path.is_file() and len(json.loads(path.read_text())["losses"]) == steps


def one_run(args, runs, arm, lr, files):
    """Dumps and compares one run (each skipped when done); returns its report."""
    name = f"{arm}-lr{lr}"
    out, vocab, config = runs / name, *files
    dump = out / "trajectory"
    if not dumped(dump, args.steps):
        run([args.bin, "train", "mlm", "--config", config, "--vocab", vocab,
             "--position", arm, "--corpus", args.corpus, "--seq-len", 128, "--batch", 32,
             "--steps", args.total, "--lr", lr, "--warmup", 50, "--decay", "linear",
             "--weight-decay", 0.01, "--max-grad-norm", 1, "--seed", args.seed,
             "--validation", 0.05, "--eval-batches", 16, "--precision", "f32",
             "--dump-steps", args.steps, "--stop-after", args.steps,
             "--quiet", "--out", out, "--overwrite"], runs / f"{name}.log")
    report_path, wall = out / "compare.json", out / "pytorch-seconds.txt"
    if not report_path.is_file() or report_path.stat().st_mtime < (dump / "run.json").stat().st_mtime:
        started = time.time()
        run([sys.executable, ROOT / "scripts/compare_trajectory.py", dump,
             "--strict-steps", args.strict_steps, "--json", report_path,
             "--threads", args.threads], runs / f"{name}.compare.log")
        wall.write_text(f"{time.time() - started:.1f}\n")
    report = refreshed(json.loads(report_path.read_text()), dump, args)
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    seconds = {"roformer_steps": sum(s["seconds"] for s in steps if s["event"] == "step"),
               "pytorch": float(wall.read_text()) if wall.is_file() else None}
    report.update({"arm": arm, "run": name, "seconds": seconds})
    return report


def refreshed(report, dump, args):
    """`report` with its verdict recomputed by the current `compare_trajectory.compare` from
    the steps it holds (a report written by an earlier version of the script is not rerun)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import compare_trajectory

    detail = report["steps_detail"]
    run_record = json.loads((dump / "run.json").read_text())
    summary = compare_trajectory.compare(
        run_record, [s["ours"] for s in detail], [s["theirs"] for s in detail],
        [s["grad_norm_theirs"] for s in detail],
        argparse.Namespace(strict_steps=args.strict_steps, bound=args.bound))
    return {**report, **summary}


def figure(path, reports, lrs):
    """The 2x2 figure: a panel per arm and rate, both curves and the relative difference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(ARMS), len(lrs), figsize=(5.2 * len(lrs), 3.8 * len(ARMS)),
                             squeeze=False)
    for r in reports:
        ax = axes[list(ARMS).index(r["arm"])][lrs.index(r["lr_flag"])]
        steps = [s["step"] for s in r["steps_detail"]]
        ax.plot(steps, [s["theirs"] for s in r["steps_detail"]], label="PyTorch (transformers)")
        ax.plot(steps, [s["ours"] for s in r["steps_detail"]], "--", label="roformer")
        ax.set(title=f"{r['arm']} ({r['model']}), lr {r['lr_flag']}", xlabel="step",
               ylabel="training loss")
        ax.grid(alpha=0.3)
        twin = ax.twinx()
        twin.semilogy(steps, [max(s["rel"], 1e-9) for s in r["steps_detail"]], color="grey",
                      linewidth=0.7, label="|ours - theirs| / theirs")
        twin.axhline(r["bound"], color="red", linewidth=0.7, linestyle=":")
        twin.set_ylim(1e-9, 1)
        twin.set_ylabel("relative difference (grey; red: 1e-3)")
        if ax is axes[0][0]:
            ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def section(reports, args):
    """The markdown section: the command, the table and the verdict."""
    lines = [
        "```sh",
        "~/.cache/roformer-peers/venv/bin/python scripts/trajectory_check.py",
        "```",
        "",
        f"The convergence experiment's model, data and schedule (seed {args.seed}, 32 x 128 "
        f"tokens a step, warm-up 50 and linear decay over {args.total} steps, AdamW with "
        "weight decay 0.01, clipping at 1, f32, dropout 0); the first "
        f"{args.steps} steps of our run against transformers' model trained by torch's AdamW "
        "from the same initial weights on the same masked batches. Relative difference: "
        "|ours - theirs| / theirs per step; noise: the standard deviation of PyTorch's "
        f"training loss around its 21-step moving average after step {args.strict_steps}; "
        "verdict: held when the first steps are within the bound and every later 25-step "
        "mean within two standard errors.",
        "",
        f"| arm | lr | max rel. loss diff., steps 1-{args.strict_steps} | "
        f"max rel. grad-norm diff., steps 1-{args.strict_steps} | "
        f"max diff. of 25-step mean losses, steps {args.strict_steps + 1}-{args.steps} | "
        f"noise (2 std. errors of such a mean) | final loss, ours / PyTorch | verdict |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    for r in reports:
        verdict = "held" if r["held"] else "not held"
        lines.append(
            f"| {r['arm']} | {r['lr_flag']} | {r['max_rel_first']:.1e} | "
            f"{r['max_norm_rel_first']:.1e} | {r['max_window_mean_diff_later']:.1e} | "
            f"{r['noise_later']:.2f} ({r['window_tolerance']:.2f}) | "
            f"{r['final']['ours']:.4f} / {r['final']['theirs']:.4f} | "
            f"{verdict} |")
    lines += ["", "![trajectories](experiments/trajectory/trajectory.png)", ""]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "experiments/trajectory")
    p.add_argument("--corpus", type=Path, default=ROOT / "data/chinese-poetry/poems")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--total", type=int, default=500)
    p.add_argument("--strict-steps", type=int, default=50)
    p.add_argument("--bound", type=float, default=1e-3)
    p.add_argument("--lrs", default="3e-3,1e-3")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bin", type=Path,
                   default=Path(os.environ.get("BIN", ROOT / "target/release/roformer")))
    args = p.parse_args()
    lrs = args.lrs.split(",")
    runs = args.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    files = inputs(args, runs)
    reports = []
    for lr in lrs:
        for arm in ARMS:
            report = one_run(args, runs, arm, lr, files)
            report["lr_flag"] = lr
            reports.append(report)
            print(json.dumps({k: report[k] for k in
                              ("run", "max_rel_first", "max_rel_all", "max_norm_rel_first",
                               "max_abs_later", "noise_later", "held")}), flush=True)
    reports.sort(key=lambda r: (list(ARMS).index(r["arm"]), lrs.index(r["lr_flag"])))
    figure(args.out / "trajectory.png", reports, lrs)
    summary = [{k: v for k, v in r.items() if k != "steps_detail"} for r in reports]
    (args.out / "results.json").write_text(json.dumps(
        {"command": " ".join(sys.argv), "runs": summary}, indent=1) + "\n")
    (args.out / "section.md").write_text(section(reports, args))
    return 0 if all(r["held"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
