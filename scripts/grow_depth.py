#!/usr/bin/env python3
"""Deepens a RoFormer (or BERT) checkpoint directory by copying its encoder layers.

A model grown this way starts from what the smaller one learnt instead of from random
weights; training then goes on at the larger size (progressive stacking, Gong et al. 2019,
"Efficient Training of BERT by Progressively Stacking"). Two orders of the copies:

- ``stack``: the layers, then the same layers again on top (Gong et al.): 0 1 2 3 0 1 2 3;
- ``interleave``: each layer followed by its copy: 0 0 1 1 2 2 3 3.

Neither order computes the smaller model's function (a post-LN layer applied twice does not
leave its input unchanged), so the grown model's loss starts above the smaller one's and has
to recover; ``roformer eval mlm`` on the grown directory measures by how much.

Usage:
    python3 scripts/grow_depth.py SRC OUT --layers 8 [--order stack|interleave]

SRC holds config.json, model.safetensors and the tokenizer files; OUT gets the same files
with ``num_hidden_layers`` and the layer tensors changed, everything else copied. Floating
tensors are written in f32 whatever SRC stores (the built-in model ships f16), so that training
continues from f32 master weights. Needs ``safetensors`` and ``numpy``.
"""

import argparse
import json
import re
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

LAYER = re.compile(r"^(?P<scope>.*\.encoder\.layer\.)(?P<index>\d+)(?P<rest>\..*)$")


def plan(old_count: int, new_count: int, order: str) -> list[int]:
    """For each new layer, the index of the old layer it copies."""
    if new_count <= old_count:
        raise SystemExit(f"--layers {new_count} does not deepen a model of {old_count} layers")
    if order == "stack":
        return [i % old_count for i in range(new_count)]
    # interleave: old layer j fills new layers j * new / old .. (j + 1) * new / old
    return [i * old_count // new_count for i in range(new_count)]


def grow(tensors: dict, old_count: int, copies: list[int]) -> dict:
    """The tensors of the grown model: non-layer tensors as they are, layer i from copies[i]."""
    by_layer: dict[int, dict[str, object]] = {}
    grown = {}
    for name, value in tensors.items():
        m = LAYER.match(name)
        if m is None:
            grown[name] = value
            continue
        index = int(m["index"])
        if index >= old_count:
            raise SystemExit(f"{name}: layer {index} past num_hidden_layers {old_count}")
        by_layer.setdefault(index, {})[m["scope"] + "{}" + m["rest"]] = value
    missing = [j for j in range(old_count) if j not in by_layer]
    if missing:
        raise SystemExit(f"no tensors for layers {missing}")
    for new, old in enumerate(copies):
        for pattern, value in by_layer[old].items():
            grown[pattern.format(new)] = value.copy()
    return grown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, required=True, help="layers of the grown model")
    parser.add_argument("--order", choices=["stack", "interleave"], default="stack")
    args = parser.parse_args()

    config = json.loads((args.src / "config.json").read_text())
    old_count = config["num_hidden_layers"]
    copies = plan(old_count, args.layers, args.order)
    tensors = {
        name: value.astype(np.float32) if np.issubdtype(value.dtype, np.floating) else value
        for name, value in load_file(str(args.src / "model.safetensors")).items()
    }
    grown = grow(tensors, old_count, copies)

    args.out.mkdir(parents=True, exist_ok=True)
    for f in args.src.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors", "trainer_state.json"):
            shutil.copy2(f, args.out / f.name)
    config["num_hidden_layers"] = args.layers
    (args.out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(grown, str(args.out / "model.safetensors"), metadata={"format": "pt"})
    params = sum(v.size for k, v in grown.items() if "embed_positions" not in k)
    print(
        f"{args.out}: {args.layers} layers copied from {copies} of {old_count} "
        f"({args.order}); {params:,} parameters"
    )


if __name__ == "__main__":
    main()
