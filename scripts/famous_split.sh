#!/usr/bin/env bash
# The famous-couplet score of a model on two halves of the Three Hundred Tang Poems: the
# couplets the corpus has, and the ones it lacked (scripts/corpus-gaps/, added to the corpus
# as poems/variants/ by fetch_chinese_poetry.sh). Writes OUT/famous-in.json and
# OUT/famous-gap.json (`eval mlm --famous --famous-file` on each half, both scripts).
#
#   cargo build --release -p roformer-cli
#   scripts/famous_split.sh MODEL_DIR OUT_DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
model=$1; out=$2
mkdir -p "$out"
python3 - "$out" <<'PY'
import json, sys
sys.path.insert(0, "scripts")
from anthology_gaps import couplets
out = sys.argv[1]
gaps = {(g["title"], g["paragraphs"][0])
        for g in json.load(open("scripts/corpus-gaps/tangshisanbaishou-gaps.json"))}
anthology = json.load(open("data/chinese-poetry-2.0.1/dist/mengxue/tangshisanbaishou.json"))
halves = {k: [] for k in ("in", "gap")}
for section in anthology["content"]:
    for poem in section["content"]:
        for couplet in couplets(poem["paragraphs"]):
            half = "gap" if (poem["chapter"], couplet) in gaps else "in"
            halves[half].append({"chapter": poem["chapter"], "subchapter": None,
                                 "author": poem["author"], "paragraphs": [couplet]})
for half, poems in halves.items():
    with open(f"{out}/anthology-{half}.json", "w") as f:
        json.dump({"title": half, "content": [{"type": half, "content": poems}]}, f,
                  ensure_ascii=False)
    print(f"{half}: {len(poems)} couplets")
PY
for half in in gap; do
    target/release/roformer eval mlm --model "$model" --corpus data/chinese-poetry/poems \
        --also-simplified --famous --famous-file "$out/anthology-$half.json" --json \
        > "$out/famous-$half.json"
done
