#!/usr/bin/env python3
"""Copies a checkpoint directory written by `roformer train mlm` with its weights stored as f16
(half the size; every f32 value rounded to the nearest f16, except the sinusoidal position
table, which transformers reads from the file), for the model built into the
`roformer` binary (crates/roformer-builtin/assets/poetry-model/).

Copies config.json, vocab.txt and tokenizer_config.json unchanged and writes model.safetensors
with the metadata {"format": "pt"}; optimizer.safetensors and trainer_state.json are left out.
A checkpoint saved in shards (`save_pretrained(max_shard_size=...)`, as
`continue_in_pytorch.py --save-shard-mb` writes for a device's per-file transfer limit: a
model.safetensors.index.json and the shards it names) is joined into the one file `roformer`
reads. vocab.txt and tokenizer_config.json are taken from --tokenizer-from DIR instead when
given (a device's output may leave them out to stay within its file count).

    ~/.cache/roformer-peers/venv/bin/python scripts/to_f16.py CHECKPOINT_DIR OUT_DIR \
        [--tokenizer-from DIR]

Needs torch and safetensors (the peers virtualenv has both).
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def load_weights(src: Path) -> dict:
    """model.safetensors, or the shards a model.safetensors.index.json names, joined."""
    single = src / "model.safetensors"
    if single.exists():
        return load_file(single)
    index = src / "model.safetensors.index.json"
    if not index.exists():
        sys.exit(f"{src}: no model.safetensors nor model.safetensors.index.json")
    weight_map = json.loads(index.read_text())["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        tensors.update(load_file(src / shard))
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        sys.exit(f"{index}: tensors not in any shard: {missing}")
    return tensors


def main() -> None:
    args = sys.argv[1:]
    tokenizer_from = None
    if len(args) == 4 and args[2] == "--tokenizer-from":
        tokenizer_from = Path(args[3])
        args = args[:2]
    if len(args) != 2:
        sys.exit(__doc__)
    src, dst = Path(args[0]), Path(args[1])
    dst.mkdir(parents=True, exist_ok=True)
    tensors = load_weights(src)
    # The sinusoidal position table stays f32: transformers reads it from the file, and its
    # f16 rounding (up to 5e-4) moves the logits by about 1e-3 where we recompute it exactly.
    half = {
        k: (v.to(torch.float16) if v.is_floating_point() and "embed_positions" not in k else v)
        .contiguous()
        for k, v in tensors.items()
    }
    save_file(half, dst / "model.safetensors", metadata={"format": "pt"})
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        origin = tokenizer_from if tokenizer_from and name != "config.json" else src
        shutil.copyfile(origin / name, dst / name)
    size = (dst / "model.safetensors").stat().st_size
    print(f"{dst}/model.safetensors: {len(half)} tensors, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
