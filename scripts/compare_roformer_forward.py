#!/usr/bin/env python3
"""RoFormer forward throughput: `roformer bench model` against transformers' RoFormerModel on
PyTorch (the peer script ../shared/peers/roformer_bench.py), measured in one session.

The two run alternately, ROUNDS times each (ours, theirs, ours, theirs, ...), so that slow
phases of a shared machine hit both alike; with --quiet, each run starts only once the
machine has been that idle for 3 s (from /proc/stat; up to --max-wait seconds, then it runs
anyway and says so). Each run is a separate process with the same warm
glibc allocator settings (the peers' README), the same thread count, the same configs and
shapes, random weights and all-ones attention masks. Per case the script reports the median
over rounds of each side's per-run median, tokens/s and the ratio ours / PyTorch, as a
markdown table (and the raw runs as JSON with --json).

    ~/.cache/roformer-peers/venv/bin/python scripts/compare_roformer_forward.py \\
        --roformer target/release/roformer --rounds 3

Needs: the peers' virtualenv (torch, transformers) and a release build of `roformer`.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT.parent / "shared" / "peers" / "roformer_bench.py"
WARM = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736"}


def uptime():
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


def run_ours(args, shapes):
    cmd = [args.roformer, "bench", "model", "--json", "--configs", args.configs,
           "--shapes", ",".join(f"{b}x{t}" for b, t in shapes),
           "--threads", str(args.threads), "--seconds", str(args.min_time),
           "--min-reps", str(args.min_reps)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, **WARM}).stdout
    return {(r["config"], r["batch"], r["seq"]): r["seconds"]
            for r in map(json.loads, out.splitlines())}


def run_torch(args, shapes):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "torch.json"
        cmd = [sys.executable, str(PEER), "--threads", str(args.threads), "--configs", args.configs,
               "--min-reps", str(args.min_reps), "--min-time", str(args.min_time),
               "--json", str(out)]
        subprocess.run(cmd, check=True, capture_output=True, text=True,
                       env={**os.environ, **WARM, "HF_HUB_OFFLINE": "1"})
        results = json.loads(out.read_text())["results"]
    wanted = set(shapes)
    return {(r["config"], r["batch"], r["seq"]): r["median_s"]
            for r in results if (r["batch"], r["seq"]) in wanted}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--roformer", default=str(ROOT / "target" / "release" / "roformer"))
    ap.add_argument("--configs", default="small,base")
    ap.add_argument("--shapes", default="1x128,1x512,8x128,8x512")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--json", help="write every run's medians here")
    ap.add_argument("--quiet", type=float, default=0.0,
                    help="idle fraction (e.g. 0.95) to wait for before each run; 0: no wait")
    ap.add_argument("--max-wait", type=float, default=300.0)
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]

    runs = {"ours": [], "torch": [], "load": [], "quiet": []}

    def settle():
        if args.quiet > 0:
            runs["quiet"].append(wait_quiet(args.quiet, args.max_wait))

    for r in range(args.rounds):
        runs["load"].append(uptime())
        settle()
        runs["ours"].append(run_ours(args, shapes))
        settle()
        runs["torch"].append(run_torch(args, shapes))
        print(f"round {r + 1}/{args.rounds} done (load average before: {runs['load'][-1]})",
              file=sys.stderr, flush=True)

    print(f"| config | batch | seq | ours ms | PyTorch ms | ours tokens/s | PyTorch tokens/s "
          f"| ours / PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for key in runs["ours"][0]:
        if key not in runs["torch"][0]:
            continue
        config, b, t = key
        ours = statistics.median(run[key] for run in runs["ours"])
        torch = statistics.median(run[key] for run in runs["torch"])
        print(f"| {config} | {b} | {t} | {ours * 1e3:.1f} | {torch * 1e3:.1f} | "
              f"{b * t / ours:.0f} | {b * t / torch:.0f} | {torch / ours:.2f} |")
    print(f"\nload average (1 min) before each round: {', '.join(runs['load'])}")
    if args.quiet > 0:
        print(f"runs that started after {args.quiet:.0%} idle for 3 s: "
              f"{sum(runs['quiet'])} of {len(runs['quiet'])}")
    print("ratio per round: " + "; ".join(
        f"{c} {b}x{t}: " + "/".join(f"{torch_run[(c, b, t)] / ours_run[(c, b, t)]:.2f}"
                                    for ours_run, torch_run in zip(runs["ours"], runs["torch"]))
        for (c, b, t) in runs["ours"][0] if (c, b, t) in runs["torch"][0]))
    if args.json:
        serial = {k: [{"/".join(map(str, key)): v for key, v in run.items()} for run in runs[k]]
                  if k in ("ours", "torch") else runs[k] for k in runs}
        Path(args.json).write_text(json.dumps(serial, indent=1))


if __name__ == "__main__":
    main()
