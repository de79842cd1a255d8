#!/usr/bin/env bash
# Peak memory of loading a base-size RoFormer checkpoint: `roformer forward` on a 4-token
# input, under `/usr/bin/time -v` ("Maximum resident set size"), three runs each for the
# safetensors file and the torch.save archive.
#
# The checkpoint is a randomly initialised transformers RoFormerForMaskedLM (hidden 768,
# 12 layers, 12 heads, vocab 50000: 497 MB of f32 safetensors), written once into CKPT_DIR
# (kept outside git) with the Python venv that has torch and transformers.
#
# Usage: scripts/measure_load_rss.sh [ROFORMER_BIN] [CKPT_DIR]
#   ROFORMER_BIN  default target/release/roformer (cargo build --release -p roformer-cli)
#   CKPT_DIR      default /work/big-ckpt
#   PYTHON        default ~/.cache/roformer-peers/venv/bin/python
set -euo pipefail

BIN=${1:-target/release/roformer}
CKPT=${2:-/work/big-ckpt}
PYTHON=${PYTHON:-$HOME/.cache/roformer-peers/venv/bin/python}

if [ ! -f "$CKPT/st/model.safetensors" ] || [ ! -f "$CKPT/bin/pytorch_model.bin" ]; then
    mkdir -p "$CKPT"
    "$PYTHON" - "$CKPT" <<'PY'
import sys
import torch
from transformers import RoFormerConfig, RoFormerForMaskedLM

out = sys.argv[1]
torch.manual_seed(0)
config = RoFormerConfig(
    vocab_size=50000,
    embedding_size=768,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=1536,
)
model = RoFormerForMaskedLM(config).eval()
model.save_pretrained(f"{out}/st")
# transformers 5 writes only safetensors; the archive is what torch.save writes for older ones.
model.config.save_pretrained(f"{out}/bin")
torch.save(model.state_dict(), f"{out}/bin/pytorch_model.bin")
PY
fi

echo '{"input_ids": [[2, 1000, 20000, 3]]}' > "$CKPT/input.json"
echo "binary: $BIN"
for kind in st/model.safetensors bin/pytorch_model.bin; do
    dir=$CKPT/${kind%%/*}
    bytes=$(stat -c %s "$CKPT/$kind")
    for run in 1 2 3; do
        log=$(mktemp)
        /usr/bin/time -v "$BIN" forward --model "$dir" --input "$CKPT/input.json" \
            --output "$CKPT/out.safetensors" 2> "$log" > /dev/null
        rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")
        wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$log")
        awk -v k="$kind" -v r="$run" -v rss="$rss_kb" -v b="$bytes" -v w="$wall" 'BEGIN {
            printf "%-22s run %d: file %.0f MB, peak RSS %.0f MB (%.2fx the file), wall %s\n",
                k, r, b / 1e6, rss * 1024 / 1e6, rss * 1024 / b, w }'
        rm -f "$log"
    done
done

# The NaN/infinity scan's share of the CPU samples of `roformer forward` (perf record; the scan
# is the function `any_non_finite_avx512` or `_avx2`, chosen at run time; on a CPU with
# neither it is inlined into the copy and cannot be told apart).
if command -v perf > /dev/null; then
    for kind in st bin; do
        for run in 1 2 3 4 5; do
            data=$(mktemp)
            perf record -q -o "$data" -F 4000 -- "$BIN" forward --model "$CKPT/$kind" \
                --input "$CKPT/input.json" --output "$CKPT/out.safetensors" > /dev/null 2>&1
            perf report -i "$data" --stdio --no-children --sort symbol 2> /dev/null |
                awk '/any_non_finite/ {s += $1} END {printf "%s ", s + 0}'
            rm -f "$data"
        done | awk -v k="$kind" '{
            for (i = 1; i <= NF; i++) t += $i
            printf "%-4s scan share of the samples of 5 runs: %s(mean %.2f%%)\n", k, $0, t / NF }'
    done
fi
