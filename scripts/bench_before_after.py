#!/usr/bin/env python3
"""Speed of two `roformer` builds, before and after a change, measured in one session with
the runs alternating (before, after, before, after, ...), so that slow phases of a shared
machine hit both alike: the rotary kernels (`bench rope`), the encoder forward (`bench
model`, f32 and bf16), training steps (`bench train`, f32 and bf16) and the GGUF LLaMA
(`bench llama`). Prints, per case, the median over rounds of each build's figure and
after / before, as a markdown table; with --json, also every run's figures.

    python3 scripts/bench_before_after.py --before OLD/roformer --after target/release/roformer \\
        --gguf data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --rounds 2

Run it on a quiet machine: pause anything else that computes (kill -STOP).
"""

import argparse
import json
import statistics
import subprocess
import sys


def cases(gguf, quick=False):
    """(name, arguments, how to read the figures: JSON lines -> {key: value}). `quick`: a
    fraction of the timing, for a smoke run of the script (its figures are not worth reading)."""
    def seconds(s):
        return str(s / 20 if quick else s)

    def lines(key_fields, value):
        def read(out):
            rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
            return {"/".join(str(r[k]) for k in key_fields): r[value] for r in rows
                    if r.get("impl") in ("rotary", "roformer-rs")}
        return read

    out = [
        ("rope", ["bench", "rope", "--json", "--rotations", "rope1d", "--seconds", seconds(0.3)],
         lines(["variant", "dtype", "layout", "shape"], "gbps")),
    ]
    for precision in ("f32", "bf16"):
        out.append((f"model {precision}",
                    ["bench", "model", "--json", "--configs", "poetry,small", "--shapes",
                     "1x128,8x128", "--seconds", seconds(2), "--precision", precision],
                    lines(["config", "batch", "seq", "precision"], "tokens_per_s")))
        out.append((f"train {precision}",
                    ["bench", "train", "--json", "--config", "poetry", "--shapes", "8x128",
                     "--seconds", seconds(6), "--precision", precision],
                    lines(["config", "batch", "seq", "precision"], "tokens_per_s")))
    if gguf:
        def llama(out):
            r = json.loads(out[out.index("{"):])
            return {"prefill tok/s": r["prefill_tok_s"], "decode tok/s": r["decode_tok_s"]}
        out.append(("llama", ["bench", "llama", "--json", "--gguf", gguf, "--prompt-tokens",
                              "128", "--new-tokens", "32", "--repeats", "1" if quick else "3"],
                    llama))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--gguf")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--only", help="run only the cases whose name starts with this (e.g. model)")
    ap.add_argument("--quick", action="store_true",
                    help="a twentieth of the timing: a smoke run of the script, not a measurement")
    args = ap.parse_args()
    runs = {"before": {}, "after": {}}
    for name, argv, read in cases(args.gguf, args.quick):
        if args.only and not name.startswith(args.only):
            continue
        for round_ in range(args.rounds):
            for side in ("before", "after"):
                binary = getattr(args, side)
                out = subprocess.run([binary, *argv], capture_output=True, text=True, check=True)
                for key, value in read(out.stdout).items():
                    runs[side].setdefault(f"{name}: {key}", []).append(value)
                print(f"{name} round {round_ + 1} {side} done", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    print("| case | before | after | after / before |")
    print("|---|---:|---:|---:|")
    ratios = []
    for key in runs["before"]:
        if key not in runs["after"]:
            continue
        b = statistics.median(runs["before"][key])
        a = statistics.median(runs["after"][key])
        ratios.append(a / b)
        print(f"| {key} | {b:.4g} | {a:.4g} | {a / b:.3f} |")
    geo = statistics.geometric_mean(ratios) if ratios else float("nan")
    print(f"\n{len(ratios)} cases; geometric mean after / before {geo:.3f}, "
          f"lowest {min(ratios):.3f}, highest {max(ratios):.3f}")


if __name__ == "__main__":
    main()
