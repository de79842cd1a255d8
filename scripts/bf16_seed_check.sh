#!/usr/bin/env bash
# Issue 17's bf16 correctness check: `train mlm` of the built-in model's config from scratch,
# f32 and bf16 from the same seed (same initial weights, data order and masks), a whole
# 1000-step schedule each, 3 seeds; prints the final validation loss of each pair and their
# relative difference. The two runs of a seed go side by side, one thread each.
#
#   scripts/bf16_seed_check.sh OUT_DIR [SEEDS...]      (default seeds: 0 1 2)
#
# Needs a release build (target/release/roformer) and the corpus (scripts/fetch_chinese_poetry.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/target/release/roformer}
out=$1; shift
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(0 1 2)
assets=$root/crates/roformer-builtin/assets/poetry-model
mkdir -p "$out"
for seed in "${seeds[@]}"; do
  for precision in f32 bf16; do
    RAYON_NUM_THREADS=1 "$bin" train mlm --config "$assets/config.json" --vocab "$assets/vocab.txt" \
      --corpus "$root/data/chinese-poetry/poems" --also-simplified --also-lines 0.3 --alone-share 0.1 \
      --seq-len 128 --batch 8 --steps 1000 --lr 1e-3 --warmup 100 --seed "$seed" \
      --eval-every 1000 --eval-batches 100 --save-every 1000 --precision "$precision" \
      --out "$out/$precision-s$seed" --overwrite --json > "$out/$precision-s$seed.log" 2>&1 &
  done
  wait
done
python3 - "$out" "${seeds[@]}" <<'PY'
import json, sys
out, seeds = sys.argv[1], sys.argv[2:]
def final(path):
    evals = [json.loads(l) for l in open(path) if '"event":"eval"' in l]
    return evals[-1]["loss"]
print("| seed | f32 validation loss | bf16 | bf16 / f32 - 1 |")
print("|---|---:|---:|---:|")
for s in seeds:
    a, b = final(f"{out}/f32-s{s}.log"), final(f"{out}/bf16-s{s}.log")
    print(f"| {s} | {a:.4f} | {b:.4f} | {100 * (b / a - 1):+.2f} % |")
PY
