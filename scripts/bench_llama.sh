#!/usr/bin/env bash
# SmolLM2-135M prefill and decode speed: ours against the peers, in alternating rounds.
#
#   scripts/bench_llama.sh [ROUNDS] [OUT_DIR]        (defaults: 3, /tmp/bench-llama)
#
# Each round runs, one after the other on the same 2 threads:
#   ours, Q4_1 as stored   target/release/roformer bench llama --json
#   ours, f32              target/release/roformer bench llama --dequantize --json
#   peers                  scripts/bench_llama_peers.py --json  (transformers f32 on PyTorch,
#                          llama.cpp Q4_1 through llama-cpp-python)
# with 128 prompt tokens, 64 decode steps, 3 timed runs after a warm-up each. It then prints the
# median tokens/s over the rounds of every runtime and its ratio to each peer, as a Markdown
# table. Needs the model (scripts/fetch_smollm2.sh), a release build of the CLI, and the
# peers' virtualenv (PEERS_PYTHON, default ~/.cache/roformer-peers/venv/bin/python, with torch,
# transformers, gguf, accelerate and llama-cpp-python).
set -euo pipefail

rounds="${1:-3}"
out="${2:-/tmp/bench-llama}"
python="${PEERS_PYTHON:-$HOME/.cache/roformer-peers/venv/bin/python}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mkdir -p "$out"
export RAYON_NUM_THREADS="${RAYON_NUM_THREADS:-2}"

for round in $(seq 1 "$rounds"); do
    echo "round $round/$rounds (load average: $(cut -d' ' -f1 /proc/loadavg))" >&2
    target/release/roformer bench llama --json > "$out/ours-q4_1-$round.json"
    target/release/roformer bench llama --dequantize --json > "$out/ours-f32-$round.json"
    HF_HUB_OFFLINE=1 "$python" scripts/bench_llama_peers.py --threads 2 \
        --json "$out/peers-$round.json" > /dev/null
done

python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {"ours Q4_1": [], "ours f32": [], "llama.cpp Q4_1": [], "transformers f32": []}
for r in range(1, rounds + 1):
    for name, file in (("ours Q4_1", "ours-q4_1"), ("ours f32", "ours-f32")):
        j = json.load(open(f"{out}/{file}-{r}.json"))
        runs[name].append((j["prefill_tok_s"], j["decode_tok_s"], j["rope_share_decode"]))
    peers = json.load(open(f"{out}/peers-{r}.json"))["peers"]
    for name, key in (("llama.cpp Q4_1", "llama.cpp-q4_1"), ("transformers f32", "transformers-f32")):
        if key in peers:
            runs[name].append((peers[key]["prefill_tok_s"], peers[key]["decode_tok_s"], None))
med = {k: (statistics.median(p for p, _, _ in v), statistics.median(d for _, d, _ in v),
           statistics.median(s for _, _, s in v) if v and v[0][2] is not None else None)
       for k, v in runs.items() if v}
print("| runtime | prefill tok/s | decode tok/s | RoPE share of a decode step |")
print("|---|---:|---:|---:|")
for k, (p, d, s) in med.items():
    share = f"{100 * s:.3f}%" if s is not None else "-"
    print(f"| {k} | {p:.1f} | {d:.1f} | {share} |")
print()
for ours in ("ours Q4_1", "ours f32"):
    for peer in ("llama.cpp Q4_1", "transformers f32"):
        if ours in med and peer in med:
            print(f"{ours} / {peer}: prefill {med[ours][0] / med[peer][0]:.2f}x, "
                  f"decode {med[ours][1] / med[peer][1]:.2f}x")
PY
