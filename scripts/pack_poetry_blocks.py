#!/usr/bin/env python3
"""Writes the packed masked-LM blocks of the chinese-poetry corpus as a uint16 .npy, for
`continue_in_pytorch.py --blocks` / `--eval-blocks` on a machine that has no corpus (a GPU
machine the corpus is carried to as a compressed file).

    ~/.cache/roformer-peers/venv/bin/python scripts/pack_poetry_blocks.py \\
        --init crates/roformer-builtin/assets/poetry-model --corpus data/chinese-poetry/poems \\
        --split held-out --out held-out.npy
    ... --split train --also-simplified --also-lines 0.3 --sample 0.85 --out train.npy

--split train: the documents `roformer train mlm` trains on (its hash split), with the
simplified copies and lines it would add; --split held-out: the held-out documents as they
are (no copies, no lines), the ones `roformer eval mlm` reads; --split train-docs: the training
documents themselves, tokenised but neither copied, split into lines nor packed, as an .npz
that `continue_in_pytorch.py --docs` turns into blocks where it runs (a third of the size of
the packed blocks, so all of the corpus fits a device's transfer limit):
`tokens` (uint16, the documents one after another), `offsets` (int64, document k is
tokens[offsets[k]:offsets[k+1]]), `simplified` (uint16, for each vocabulary id the id of its
simplified character by zhconv, itself where there is none or it is not in the vocabulary) and
`line_ends` (the ids of the line-ending marks ，。？！；：、,.?!;: that `--also-lines` splits at). Both packed as
`continue_in_pytorch.py` packs them. --sample keeps that share of the blocks, chosen at
random (seeded), in their order. --from-cache reads the train blocks from a cache file that
`continue_in_pytorch.py` wrote for the same options instead of building them again.
"""

import argparse
from pathlib import Path

import numpy as np

import continue_in_pytorch as cip


def write_train_docs(args):
    """The --split train-docs file (see the module's doc)."""
    import zhconv

    tokenizer, _ = cip.make_tokenizer(args.init)
    docs = cip.read_poems(cip.corpus_files(args.corpus))
    train = [d for d in docs if not cip.text_position(d) < args.validation]
    token_lists = cip.tokenize(tokenizer, train)
    lengths = np.array([len(t) for t in token_lists], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = np.fromiter((i for t in token_lists for i in t), dtype=np.int64, count=int(offsets[-1]))
    if tokens.max() >= 1 << 16:
        raise SystemExit("token ids beyond uint16")
    vocab = tokenizer.get_vocab()
    simplified = np.arange(len(tokenizer), dtype=np.int64)
    for token, index in vocab.items():
        s = zhconv.convert(token, "zh-hans")
        if len(token) == 1 and s != token and s in vocab:
            simplified[index] = vocab[s]
    line_ends = np.array(sorted(vocab[c] for c in "，。？！；：、,.?!;:" if c in vocab), dtype=np.int64)
    np.savez(args.out, tokens=tokens.astype(np.uint16), offsets=offsets,
             simplified=simplified.astype(np.uint16), line_ends=line_ends)
    print(f"{args.out}: {len(train)} documents, {int(offsets[-1])} tokens, "
          f"{int((simplified != np.arange(len(simplified))).sum())} ids with a simplified form")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", required=True, type=Path, help="checkpoint dir (vocab.txt)")
    p.add_argument("--corpus", type=Path, nargs="+")
    p.add_argument("--split", choices=["train", "held-out", "train-docs"], required=True)
    p.add_argument("--validation", type=float, default=0.05)
    p.add_argument("--also-simplified", action="store_true")
    p.add_argument("--also-lines", type=float, default=0.0)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--sample", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from-cache", type=Path, default=None)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    if args.split == "train-docs":
        write_train_docs(args)
        return
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
