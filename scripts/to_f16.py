#!/usr/bin/env python3
"""Copies a checkpoint directory written by `roformer train mlm` with its weights stored as f16
(half the size; every f32 value rounded to the nearest f16, except the sinusoidal position
table, which transformers reads from the file), for the model built into the
`roformer` binary (crates/roformer-cli/assets/poetry-model/).

Copies config.json, vocab.txt and tokenizer_config.json unchanged and writes model.safetensors
with the metadata {"format": "pt"}; optimizer.safetensors and trainer_state.json are left out.

    ~/.cache/roformer-peers/venv/bin/python scripts/to_f16.py CHECKPOINT_DIR OUT_DIR

Needs torch and safetensors (the peers virtualenv has both).
"""

import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    tensors = load_file(src / "model.safetensors")
    # The sinusoidal position table stays f32: transformers reads it from the file, and its
    # f16 rounding (up to 5e-4) moves the logits by about 1e-3 where we recompute it exactly.
    half = {
        k: (v.to(torch.float16) if v.is_floating_point() and "embed_positions" not in k else v)
        .contiguous()
        for k, v in tensors.items()
    }
    save_file(half, dst / "model.safetensors", metadata={"format": "pt"})
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        shutil.copyfile(src / name, dst / name)
    size = (dst / "model.safetensors").stat().st_size
    print(f"{dst}/model.safetensors: {len(half)} tensors, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
