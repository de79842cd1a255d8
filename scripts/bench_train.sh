#!/usr/bin/env bash
# Training speed, ours against PyTorch, f32 and bf16, in alternating rounds.
#
#   scripts/bench_train.sh [ROUNDS] [OUT_DIR] [CONFIGS] [SHAPES]
#       defaults: 3, /tmp/bench-train, "poetry small", "8x128 32x128"
#
# Each round runs, one after the other, on the same threads (RAYON_NUM_THREADS, default 2),
# for every config and shape:
#   ours       target/release/roformer bench train --precision f32|bf16 --json
#   PyTorch    scripts/bench_train_peers.py --precision f32|bf16  (transformers'
#              RoFormerForMaskedLM + AdamW; bf16 = torch.autocast("cpu", dtype=torch.bfloat16))
# each case in a fresh process with glibc's allocator kept warm (MALLOC_MMAP_THRESHOLD_,
# MALLOC_TRIM_THRESHOLD_, as our bench does for itself). It then prints, per config and shape,
# the median tokens/s and peak RSS of every runtime and the ratios, as Markdown. Stop other
# work first (a training run: kill -STOP its pid). Needs a release build of the CLI and the
# peers' virtualenv (PEERS_PYTHON, default ~/.cache/roformer-peers/venv/bin/python).
set -euo pipefail

rounds="${1:-3}"
out="${2:-/tmp/bench-train}"
configs="${3:-poetry small}"
shapes="${4:-8x128 32x128}"
python="${PEERS_PYTHON:-$HOME/.cache/roformer-peers/venv/bin/python}"
seconds="${SECONDS_PER_CASE:-10}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mkdir -p "$out"
rm -f "$out"/*.json
threads="${RAYON_NUM_THREADS:-2}"
export RAYON_NUM_THREADS="$threads"
export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736

for round in $(seq 1 "$rounds"); do
    echo "round $round/$rounds (load average: $(cut -d' ' -f1 /proc/loadavg))" >&2
    for config in $configs; do
        for shape in $shapes; do
            for precision in f32 bf16; do
                target/release/roformer bench train --config "$config" --shapes "$shape" \
                    --precision "$precision" --seconds "$seconds" --threads "$threads" --json \
                    >> "$out/ours.json"
                "$python" scripts/bench_train_peers.py --config "$config" --shape "$shape" \
                    --precision "$precision" --seconds "$seconds" --threads "$threads" \
                    >> "$out/pytorch.json"
            done
        done
    done
done

python3 - "$out" <<'PY'
import collections, json, statistics, sys
out = sys.argv[1]
runs = collections.defaultdict(list)
for impl in ("ours", "pytorch"):
    for line in open(f"{out}/{impl}.json"):
        r = json.loads(line)
        runs[(r["config"], f'{r["batch"]}x{r["seq"]}', impl, r["precision"])].append(r)
print("| config | shape | runtime | precision | tokens/s (median) | runs | peak RSS MB |")
print("|---|---|---|---|---:|---:|---:|")
med = {}
for key in sorted(runs):
    rs = runs[key]
    tps = statistics.median(r["tokens_per_s"] for r in rs)
    rss = max(r["peak_rss_bytes"] for r in rs) / 1e6
    med[key] = tps
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {tps:.0f} | {len(rs)} | {rss:.0f} |")
print()
for (config, shape, impl, precision), tps in sorted(med.items()):
    if impl != "ours" or precision != "bf16":
        continue
    base = {k: med.get((config, shape, *k)) for k in
            (("ours", "f32"), ("pytorch", "f32"), ("pytorch", "bf16"))}
    parts = [f"{tps / v:.2f}x {i} {p}" for (i, p), v in base.items() if v]
    print(f"{config} {shape}: ours bf16 = " + ", ".join(parts))
PY
