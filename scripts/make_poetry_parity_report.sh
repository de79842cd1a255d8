#!/usr/bin/env bash
# Parity of the built-in poetry model with transformers: our logits (`roformer forward`) against
# transformers' RoFormerForMaskedLM (scripts/check_hf_roundtrip.py --strict) on two poems, one
# per script. Writes crates/roformer-cli/tests/fixtures/poetry_model_hf_report.json, with the
# CRC-32 of the model file it checked (the test compares it with the shipped file, so a new model
# without a new report fails).
#
#   cargo build --release -p roformer-cli
#   scripts/make_poetry_parity_report.sh [PYTHON]     # default: ~/.cache/roformer-peers/venv/bin/python
#
# PYTHON needs torch, transformers 5.23, safetensors and rjieba (../shared/peers/setup.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${1:-$HOME/.cache/roformer-peers/venv/bin/python}"
roformer="$root/target/release/roformer"
model="$root/crates/roformer-builtin/assets/poetry-model"
report="$root/crates/roformer-cli/tests/fixtures/poetry_model_hf_report.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dir="$work/poetry_model"
mkdir -p "$dir"
cp "$model"/{config.json,model.safetensors,vocab.txt,tokenizer_config.json} "$dir/"
"$roformer" tokenize --json "床前明月光，疑是地上霜。" "舉頭望明月，低頭思故鄉。" > "$work/tokens.jsonl"
"$py" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
rows = [json.loads(line)["input_ids"] for line in open(f"{work}/tokens.jsonl")]
json.dump({"input_ids": rows,
           "attention_mask": [[1] * len(r) for r in rows],
           "token_type_ids": [[0] * len(r) for r in rows]}, open(f"{work}/in.json", "w"))
PY
"$roformer" forward --model "$dir" --input "$work/in.json" --output "$work/out.safetensors"
"$py" - "$work" <<'PY'
import json, sys
import torch
from safetensors.torch import load_file, save_file
work = sys.argv[1]
inputs = json.load(open(f"{work}/in.json"))
save_file({k: torch.tensor(v, dtype=torch.int64) for k, v in inputs.items()},
          f"{work}/poetry_model/inputs.safetensors")
logits = load_file(f"{work}/out.safetensors")["logits"].contiguous()
save_file({"expected_logits": logits}, f"{work}/poetry_model/ours.safetensors")
PY
status=0
(cd "$work" && HF_HUB_OFFLINE=1 "$py" "$root/scripts/check_hf_roundtrip.py" poetry_model \
    --strict --json "$work/report.json") || status=$?
"$py" - "$work/report.json" "$model/model.safetensors" "$report" <<'PY'
import json, sys, zlib
report = json.load(open(sys.argv[1]))
report["model_crc32"] = zlib.crc32(open(sys.argv[2], "rb").read())
json.dump(report, open(sys.argv[3], "w"), indent=1, ensure_ascii=False)
open(sys.argv[3], "a").write("\n")
PY
echo "wrote $report (check_hf_roundtrip exit $status)"
exit "$status"
