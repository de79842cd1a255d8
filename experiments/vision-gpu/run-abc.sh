#!/usr/bin/env bash
# One device call: three Fashion-MNIST ViT variants trained side by side on the GPU, the best on
# the validation split (the smaller margin over the 28 px and 56 px targets) kept in $OUT/vit.
set -u
export PYTHONUNBUFFERED=1
D=.gpu/fmnist
B=${1:-170}
common="--images $D/train-images-idx3-ubyte.xz --labels $D/train-labels-idx1-ubyte.gz --bf16 --time-budget-s $B"
timeout 235 python3 scripts/train_vit_pytorch.py $common --batch 512 --lr 2e-3 --out /tmp/vit-a > $OUT/vit-a.jsonl 2>&1 &
timeout 235 python3 scripts/train_vit_pytorch.py $common --batch 256 --lr 1e-3 --out /tmp/vit-b > $OUT/vit-b.jsonl 2>&1 &
timeout 235 python3 scripts/train_vit_pytorch.py $common --batch 512 --lr 1e-3 --hidden 256 --heads 4 --out /tmp/vit-c > $OUT/vit-c.jsonl 2>&1 &
wait
python3 - <<'PY'
import json, os, shutil
best, best_margin = None, -1e9
for v in "abc":
    path = os.path.join(os.environ["OUT"], f"vit-{v}.jsonl")
    final = [json.loads(l) for l in open(path) if l.startswith('{"event": "final"')]
    if not final or not os.path.exists(f"/tmp/vit-{v}/model.safetensors"):
        print(v, "no result"); continue
    f = final[-1]
    margin = min(f["val_acc_28"] - 0.92, f["val_acc_56"] - 0.88)
    print(v, json.dumps(f), "margin", round(margin, 4))
    if margin > best_margin:
        best, best_margin = v, margin
if best:
    shutil.copytree(f"/tmp/vit-{best}", os.path.join(os.environ["OUT"], "vit"))
    print("kept", best)
PY
nvidia-smi --query-gpu=name --format=csv,noheader
