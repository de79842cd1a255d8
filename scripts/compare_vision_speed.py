#!/usr/bin/env python3
"""Vision transformer speed: `roformer bench vision` against transformers' DINOv3 ViT on
PyTorch, measured in one session in alternating rounds (issue 33, part 5).

Cases, each a separate process per round (ours, then PyTorch), with the same warm glibc
allocator settings, the same thread count (`--threads`, torch.set_num_threads) and the same
seeded random weights and inputs:
  forward f32   ours: `roformer bench vision --part forward --precision f32`
                PyTorch: DINOv3ViTModel (DINOv3ViTConfig defaults = ViT-S/16, 4 registers),
                eval() under torch.no_grad(), pixels [batch, 3, 224, 224]
  forward bf16  ours: `--precision bf16` (bf16 products, f32 accumulation)
                PyTorch: the same under torch.autocast("cpu", dtype=torch.bfloat16)
  train f32     ours: `roformer bench vision --part train` (the built-in Fashion-MNIST
                config, batch 128 at 28 x 28: forward, label-smoothed loss, backward,
                clipping, AdamW)
                PyTorch: scripts/train_vit_pytorch.py's Classifier (DINOv3ViTModel + a linear
                head on concat(CLS, mean patches)) on the same config.json, the same step
                (cross entropy with label smoothing 0.1, backward, clip_grad_norm_ 1.0,
                torch.optim.AdamW lr 1e-3, weight decay 0.05 on matrices), in train() mode
With --quiet, every run starts only once the machine has been that idle for 3 s (as
compare_roformer_forward.py waits; up to --max-wait seconds, then it runs anyway and says so).
Per case the script prints the median over rounds of each side's per-run median, images/s,
the ratio ours / PyTorch (PyTorch's seconds over ours) per round, and the same ratio of CPU
seconds per call (all threads; less inflated than wall time on a busy machine), as Markdown
(every run as JSON with --json).

    ~/.cache/roformer-peers/venv/bin/python scripts/compare_vision_speed.py \\
        --roformer target/release/roformer --rounds 3 --quiet 0.9

`--peer forward|train` runs one PyTorch measurement in this process and prints it as JSON
lines (the script calls itself that way). Needs the peers' virtualenv (torch, transformers
with DINOv3ViTModel) and a release build of `roformer`.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_roformer_forward import WARM, uptime, wait_quiet  # noqa: E402

FASHION_CONFIG = ROOT / "crates" / "roformer-builtin" / "assets" / "fashion-model" / "config.json"


def timed(call, warmup, min_reps, min_time):
    """Per-call seconds of `call` after `warmup` untimed calls (at least `min_reps` calls and
    more until `min_time` seconds have passed), and the CPU seconds (all threads) per call."""
    for _ in range(warmup):
        call()
    times = []
    start, cpu = time.perf_counter(), time.process_time()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return times, (time.process_time() - cpu) / len(times)


def peer_forward(args):
    """transformers' DINOv3ViTModel (ViT-S/16 defaults, 4 registers) forward, eval, no_grad."""
    import torch
    from transformers import DINOv3ViTConfig, DINOv3ViTModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = DINOv3ViTConfig(num_register_tokens=4)
    model = DINOv3ViTModel(config).eval()
    params = sum(p.numel() for p in model.parameters())
    for batch in args.batches:
        x = torch.randn(batch, config.num_channels, args.size, args.size)

        def call():
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                 enabled=args.precision == "bf16"):
                model(pixel_values=x)

        times, cpu_s = timed(call, args.warmup, args.min_reps, args.seconds)
        seconds = statistics.median(times)
        print(json.dumps({
            "impl": "transformers", "part": "forward", "config": "vits16", "size": args.size,
            "batch": batch, "precision": args.precision, "reps": len(times),
            "seconds": seconds, "images_per_s": batch / seconds, "cpu_s": cpu_s, "params": params,
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "attn_implementation": model.config._attn_implementation,
        }), flush=True)


def peer_train(args):
    """Training steps of train_vit_pytorch.py's Classifier on the built-in model's config."""
    import torch
    import torch.nn.functional as F
    from transformers import DINOv3ViTConfig

    from train_vit_pytorch import Classifier

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = DINOv3ViTConfig.from_json_file(str(FASHION_CONFIG))
    model = Classifier(config).train()
    params = sum(p.numel() for p in model.parameters())
    # The optimiser groups of train_vit_pytorch.py: decay on matrices, not on tokens.
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "token" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "token" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    size = config.image_size  # 28, as `roformer bench vision --part train` takes it
    for batch in args.batches:
        x = torch.randn(batch, config.num_channels, size, size)
        y = torch.randint(0, config.num_labels, (batch,))
        losses = []

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y, label_smoothing=0.1)
            losses.append(loss.item())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        times, cpu_s = timed(step, args.warmup, args.min_reps, args.seconds)
        seconds = statistics.median(times)
        print(json.dumps({
            "impl": "pytorch", "part": "train", "config": "fashion", "size": size,
            "batch": batch, "precision": args.precision, "reps": len(times),
            "seconds": seconds, "images_per_s": batch / seconds, "cpu_s": cpu_s, "params": params,
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "first_loss": losses[0], "last_loss": losses[-1],
        }), flush=True)


def run_json_lines(cmd, threads):
    env = {**os.environ, **WARM, "RAYON_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def case_commands(args, part, precision, batches):
    """Our command and PyTorch's for one case."""
    common = ["--batches", ",".join(map(str, batches)), "--precision", precision,
              "--warmup", str(args.warmup), "--min-reps", str(args.min_reps),
              "--seconds", str(args.seconds if part == "forward" else args.train_seconds)]
    ours = [args.roformer, "bench", "vision", "--json", "--part", part,
            "--threads", str(args.threads)] + common
    theirs = [sys.executable, str(Path(__file__).resolve()), "--peer", part,
              "--threads", str(args.threads)] + common
    if part == "forward":
        ours += ["--size", str(args.size)]
        theirs += ["--size", str(args.size)]
    return ours, theirs


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--roformer", default=str(ROOT / "target" / "release" / "roformer"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=224, help="forward image side")
    ap.add_argument("--forward-batches", default="1,8")
    ap.add_argument("--train-batches", default="128")
    ap.add_argument("--parts", default="forward-f32,forward-bf16,train-f32",
                    help="comma-separated: forward-f32, forward-bf16, train-f32, train-bf16")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="per forward case and run")
    ap.add_argument("--train-seconds", type=float, default=10.0, help="per train case and run")
    ap.add_argument("--json", help="write every run's records here")
    ap.add_argument("--quiet", type=float, default=0.0,
                    help="idle fraction (e.g. 0.9) to wait for before each run; 0: no wait")
    ap.add_argument("--max-wait", type=float, default=300.0)
    # The PyTorch side, run by the script itself in a child process.
    ap.add_argument("--peer", choices=["forward", "train"], help=argparse.SUPPRESS)
    ap.add_argument("--batches", help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="f32", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.peer:
        args.batches = [int(b) for b in args.batches.split(",")]
        (peer_forward if args.peer == "forward" else peer_train)(args)
        return

    batches = {"forward": [int(b) for b in args.forward_batches.split(",")],
               "train": [int(b) for b in args.train_batches.split(",")]}
    cases = [tuple(c.split("-")) for c in args.parts.split(",")]
    runs = {"ours": [], "theirs": [], "load": [], "quiet": []}

    def settle():
        if args.quiet > 0:
            runs["quiet"].append(wait_quiet(args.quiet, args.max_wait))

    for r in range(args.rounds):
        runs["load"].append(uptime())
        ours_round, theirs_round = {}, {}
        for part, precision in cases:
            ours_cmd, theirs_cmd = case_commands(args, part, precision, batches[part])
            settle()
            for rec in run_json_lines(ours_cmd, args.threads):
                ours_round[(part, precision, rec["batch"])] = rec
            settle()
            for rec in run_json_lines(theirs_cmd, args.threads):
                theirs_round[(part, precision, rec["batch"])] = rec
        runs["ours"].append(ours_round)
        runs["theirs"].append(theirs_round)
        print(f"round {r + 1}/{args.rounds} done (load average before: {runs['load'][-1]})",
              file=sys.stderr, flush=True)

    print("| part | precision | batch | ours ms | PyTorch ms | ours images/s | PyTorch images/s "
          "| ours / PyTorch | ratio per round | CPU s ratio per round |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in runs["ours"][0]:
        if key not in runs["theirs"][0]:
            continue
        part, precision, b = key
        ours = statistics.median(run[key]["seconds"] for run in runs["ours"])
        theirs = statistics.median(run[key]["seconds"] for run in runs["theirs"])
        pairs = list(zip(runs["ours"], runs["theirs"]))
        per_round = "/".join(f"{t[key]['seconds'] / o[key]['seconds']:.2f}" for o, t in pairs)
        cpu_round = "/".join(f"{t[key]['cpu_s'] / o[key]['cpu_s']:.2f}" for o, t in pairs)
        print(f"| {part} | {precision} | {b} | {ours * 1e3:.1f} | {theirs * 1e3:.1f} | "
              f"{b / ours:.1f} | {b / theirs:.1f} | {theirs / ours:.2f} | {per_round} "
              f"| {cpu_round} |")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "unknown")
    print(f"\nCPU: {cpu}; {args.threads} threads")
    print(f"load average (1 min) before each round: {', '.join(runs['load'])}")
    if args.quiet > 0:
        print(f"runs that started after {args.quiet:.0%} idle for 3 s: "
              f"{sum(runs['quiet'])} of {len(runs['quiet'])}")
    if args.json:
        serial = {k: [{"/".join(map(str, key)): v for key, v in run.items()} for run in runs[k]]
                  if k in ("ours", "theirs") else runs[k] for k in runs}
        Path(args.json).write_text(json.dumps(serial, indent=1))


if __name__ == "__main__":
    main()
