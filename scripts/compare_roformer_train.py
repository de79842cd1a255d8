#!/usr/bin/env python3
"""RoFormer MLM training throughput: `roformer bench train` against transformers'
RoFormerForMaskedLM + torch.optim.AdamW on PyTorch (the peer script
../shared/peers/roformer_train_bench.py), measured in one session.

The two run alternately, ROUNDS times each (ours, theirs, ours, theirs, ...), so that slow
phases of a shared machine hit both alike; with --quiet, each run starts only once the machine
has been that idle for 3 s (from /proc/stat; up to --max-wait seconds, then it runs anyway and
says so). Each run is a separate process with the warm glibc allocator settings (the peers'
README) and 2 threads (the peer script's `torch.set_num_threads(2)`), the small config at
8x128 and 8x512, random ids with 15% of the positions labelled; each side times steps for at
least --min-time seconds per shape and quotes the median step. Per shape the script reports
the median over rounds of each side's tokens/s, the ratio ours / PyTorch per round, both
peak resident sets (ours: the child process of the shape; PyTorch: the process's maximum so
far, so 8x512 includes 8x128) and the load average before each round, as markdown.

    ~/.cache/roformer-peers/venv/bin/python scripts/compare_roformer_train.py \\
        --roformer target/release/roformer --rounds 3 --quiet 0.9

Needs: the peers' virtualenv (torch, transformers) and a release build of `roformer`.
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
PEER = ROOT.parent / "shared" / "peers" / "roformer_train_bench.py"
WARM = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736"}
SHAPES = [(8, 128), (8, 512)]


def load_average():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def cpu_times():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)  # idle + iowait, total


def wait_quiet(threshold, max_wait, window=3.0):
    """Waits until the CPUs were at least `threshold` idle over `window` seconds; returns
    whether that happened within `max_wait` seconds."""
    start = time.monotonic()
    while time.monotonic() - start < max_wait:
        idle0, total0 = cpu_times()
        time.sleep(window)
        idle1, total1 = cpu_times()
        if total1 > total0 and (idle1 - idle0) / (total1 - total0) >= threshold:
            return True
    return False


def run_ours(args):
    cmd = [args.roformer, "bench", "train", "--json", "--threads", "2",
           "--shapes", ",".join(f"{b}x{t}" for b, t in SHAPES),
           "--seconds", str(args.min_time)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, **WARM}).stdout
    return {(r["batch"], r["seq"]): {"tokens_per_s": r["tokens_per_s"],
                                     "peak_mib": r["peak_rss_bytes"] / 2**20,
                                     "steps": r["steps"], "cpu_s": r["cpu_s"]}
            for r in map(json.loads, out.splitlines())}


def run_torch(args):
    cmd = [sys.executable, args.peer, str(args.min_time)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, **WARM, "HF_HUB_OFFLINE": "1"}).stdout
    return {(r["batch"], r["seq"]): {"tokens_per_s": r["tokens_per_s"],
                                     "peak_mib": r["peak_rss_mb"], "steps": r["steps"]}
            for r in map(json.loads, (l for l in out.splitlines() if l.startswith("{")))}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--roformer", default=str(ROOT / "target" / "release" / "roformer"))
    ap.add_argument("--peer", default=str(PEER), help="the peer script (default: "
                    "../shared/peers/roformer_train_bench.py beside the repository)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=10.0)
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--quiet", type=float, default=0.0,
                    help="idle fraction (e.g. 0.9) to wait for before each run; 0: no wait")
    ap.add_argument("--max-wait", type=float, default=300.0)
    args = ap.parse_args()

    runs = {"ours": [], "torch": [], "load": [], "quiet": []}

    def settle():
        if args.quiet > 0:
            runs["quiet"].append(wait_quiet(args.quiet, args.max_wait))

    for r in range(args.rounds):
        runs["load"].append(load_average())
        settle()
        runs["ours"].append(run_ours(args))
        settle()
        runs["torch"].append(run_torch(args))
        print(f"round {r + 1}/{args.rounds} done (load average before: {runs['load'][-1]})",
              file=sys.stderr, flush=True)

    print("| batch | seq | ours tokens/s | PyTorch tokens/s | ours / PyTorch (median) "
          "| per round | ours peak MiB | PyTorch peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for key in SHAPES:
        ours = [run[key]["tokens_per_s"] for run in runs["ours"]]
        torch = [run[key]["tokens_per_s"] for run in runs["torch"]]
        ratios = [o / t for o, t in zip(ours, torch)]
        peaks = (statistics.median(run[key]["peak_mib"] for run in runs["ours"]),
                 statistics.median(run[key]["peak_mib"] for run in runs["torch"]))
        print(f"| {key[0]} | {key[1]} | {statistics.median(ours):.0f} | "
              f"{statistics.median(torch):.0f} | {statistics.median(ratios):.2f} | "
              f"{' / '.join(f'{x:.2f}' for x in ratios)} | {peaks[0]:.0f} | {peaks[1]:.0f} |")
    print(f"\nload average (1 min) before each round: {', '.join(runs['load'])}")
    if args.quiet > 0:
        print(f"runs that started after {args.quiet:.0%} idle for 3 s: "
              f"{sum(runs['quiet'])} of {len(runs['quiet'])}")
    if args.json:
        serial = {k: [{f"{b}x{t}": v for (b, t), v in run.items()} for run in runs[k]]
                  if k in ("ours", "torch") else runs[k] for k in runs}
        Path(args.json).write_text(json.dumps(serial, indent=1))


if __name__ == "__main__":
    main()
