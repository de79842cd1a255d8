#!/usr/bin/env python3
"""PyTorch's own bf16 error on the built-in poetry model: the reference for `roformer eval mlm
--famous --precision bf16 --against-f32`.

Loads a RoFormer masked-LM checkpoint (default: the built-in model's files) into transformers'
RoFormerForMaskedLM in f32, and runs the couplets of the Three Hundred Tang Poems (traditional,
as in the file, and simplified with zhconv), one character masked in each (seeded; drawn here,
not the same draw as ours), twice: in f32, and under
`torch.autocast("cpu", dtype=torch.bfloat16)`. Prints, as JSON, how often the two rank the same
token first at a mask and the largest |logit difference| over every logit at every mask: the
numbers our `--against-f32` reports, for PyTorch's bf16.

    ~/.cache/roformer-peers/venv/bin/python scripts/bf16_logit_gap_pytorch.py \\
        --famous-file data/chinese-poetry-2.0.1/dist/mengxue/tangshisanbaishou.json
"""

import argparse
import json
import random
import re
from pathlib import Path

import torch
import zhconv
from transformers import BertTokenizer, RoFormerForMaskedLM

ROOT = Path(__file__).resolve().parent.parent
ENDS = "。！？；!?;"


def couplets(path):
    """The anthology's couplets: paragraphs joined, notes in brackets dropped, cut after each
    sentence end."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    out = []
    for section in data["content"]:
        for poem in section["content"]:
            text = "".join(poem["paragraphs"])
            text = re.sub(r"[（(][^）)]*[）)]?", "", text)
            text = re.sub(r"\s", "", text)
            current = ""
            for c in text:
                current += c
                if c in ENDS:
                    out.append(current)
                    current = ""
    return [c for c in out if len(c) >= 4]


def is_character(token):
    return len(token) == 1 and token.isalpha()


def masked_batch(tokenizer, texts, rng, seq_len):
    """Token ids with one character token of each text masked, and where."""
    rows, where = [], []
    for text in texts:
        ids = tokenizer(text, truncation=True, max_length=seq_len)["input_ids"]
        tokens = tokenizer.convert_ids_to_tokens(ids)
        chars = [i for i, t in enumerate(tokens) if is_character(t)]
        if not chars:
            continue
        pick = chars[rng.randrange(len(chars))]
        ids[pick] = tokenizer.mask_token_id
        rows.append(ids)
        where.append(pick)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask, where


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "crates/roformer-builtin/assets/poetry-model"))
    ap.add_argument("--famous-file", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = BertTokenizer(str(Path(args.model) / "vocab.txt"), do_lower_case=False)
    model = RoFormerForMaskedLM.from_pretrained(args.model, torch_dtype=torch.float32).eval()
    texts = couplets(args.famous_file)
    texts = texts + [zhconv.convert(t, "zh-cn") for t in texts]
    rng = random.Random(args.seed)
    masks = same = 0
    largest = 0.0
    with torch.inference_mode():
        for start in range(0, len(texts), args.batch):
            ids, mask, where = masked_batch(
                tokenizer, texts[start : start + args.batch], rng, args.seq_len
            )
            rows = torch.arange(len(where))
            cols = torch.tensor(where)
            f32 = model(input_ids=ids, attention_mask=mask).logits[rows, cols].float()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                bf16 = model(input_ids=ids, attention_mask=mask).logits[rows, cols].float()
            masks += len(where)
            same += int((f32.argmax(-1) == bf16.argmax(-1)).sum())
            largest = max(largest, float((f32 - bf16).abs().max()))
    print(json.dumps({
        "model": args.model,
        "torch": torch.__version__,
        "masks": masks,
        "same_top1": same,
        "same_top1_share": same / max(masks, 1),
        "max_abs_logit_diff": largest,
    }))


if __name__ == "__main__":
    main()
