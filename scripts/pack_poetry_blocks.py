#!/usr/bin/env python3
"""Writes the packed masked-LM blocks of the chinese-poetry corpus as a uint16 .npy, for
`continue_in_pytorch.py --blocks` / `--eval-blocks` on a machine that has no corpus (a GPU
machine the corpus is carried to as a compressed file).

    ~/.cache/roformer-peers/venv/bin/python scripts/pack_poetry_blocks.py \\
        --init crates/roformer-cli/assets/poetry-model --corpus data/chinese-poetry/poems \\
        --split held-out --out held-out.npy
    ... --split train --also-simplified --also-lines 0.3 --sample 0.85 --out train.npy

--split train: the documents `roformer train mlm` trains on (its hash split), with the
simplified copies and lines it would add; --split held-out: the held-out documents as they
are (no copies, no lines), the ones `roformer eval mlm` reads. Both packed as
`continue_in_pytorch.py` packs them. --sample keeps that share of the blocks, chosen at
random (seeded), in their order. --from-cache reads the train blocks from a cache file that
`continue_in_pytorch.py` wrote for the same options instead of building them again.
"""

import argparse
from pathlib import Path

import numpy as np

import continue_in_pytorch as cip


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", required=True, type=Path, help="checkpoint dir (vocab.txt)")
    p.add_argument("--corpus", type=Path, nargs="+")
    p.add_argument("--split", choices=["train", "held-out"], required=True)
    p.add_argument("--validation", type=float, default=0.05)
    p.add_argument("--also-simplified", action="store_true")
    p.add_argument("--also-lines", type=float, default=0.0)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--sample", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from-cache", type=Path, default=None)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    if args.from_cache is not None:
        blocks = np.load(args.from_cache, mmap_mode="r")
    else:
        tokenizer, _ = cip.make_tokenizer(args.init)
        docs = cip.read_poems(cip.corpus_files(args.corpus))
        if args.split == "held-out":
            docs = [d for d in docs if cip.text_position(d) < args.validation]
            blocks = cip.pack(cip.tokenize(tokenizer, docs), args.seq_len,
                              tokenizer.cls_token_id, tokenizer.sep_token_id)
        else:
            args.blocks, args.cache_dir = None, None
            blocks, _ = cip.prepare_blocks(args, tokenizer)
    if args.sample < 1.0:
        rng = np.random.default_rng(args.seed)
        keep = np.sort(rng.choice(len(blocks), int(len(blocks) * args.sample), replace=False))
        blocks = blocks[keep]
    if int(np.max(blocks)) >= 1 << 16:
        raise SystemExit("token ids beyond uint16")
    np.save(args.out, np.asarray(blocks, dtype=np.uint16))
    print(f"{args.out}: {len(blocks)} blocks of {args.seq_len}")


if __name__ == "__main__":
    main()
