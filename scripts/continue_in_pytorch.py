#!/usr/bin/env python3
"""Continue masked-LM pre-training of a `roformer train mlm` checkpoint in PyTorch, on as many
processes (GPUs, or CPUs with the gloo backend) as you give it, and write a checkpoint that
`roformer` loads again.

The checkpoint is a Hugging Face directory (config.json, model.safetensors, vocab.txt,
tokenizer_config.json) that transformers' `RoFormerForMaskedLM.from_pretrained` reads. The data
are prepared as `roformer train mlm` prepares them: the chinese-poetry JSON files under
--corpus (each a JSON array of poems; a document is one poem's `paragraphs` joined without
separator), the same hash split that holds out --validation of the documents (FNV-1a 64 +
MurmurHash3 fmix64 of the text, so the documents `roformer eval mlm` validates on stay
unseen), optional simplified copies after the originals (--also-simplified), tokenised with
transformers' RoFormerTokenizer over the checkpoint's vocab.txt (one id per character, the ids
`roformer tokenize` gives), packed into blocks `[CLS] d0 [SEP] d1 [SEP] ... [SEP]` of
--seq-len tokens, and masked like ours: round(15 %) of the non-special tokens of each block, of
which 80 % become [MASK], 10 % a random non-special token, 10 % stay. --also-lines SHARE adds,
as `train mlm --also-lines` does, the lines (split at ，。？！；：、,.?!;: which are dropped) of the
SHARE of the documents whose hash (salt "lines\\0") falls below it, after the simplified copies.
The blocks are built once, by the main process, and cached in OUT.cache (--cache-dir).

Training: AdamW (weight decay 0.01 except biases and LayerNorm weights; a fresh optimiser, the
moments in optimizer.safetensors are not read), linear warm-up over --warmup steps then linear
decay to 0 at --steps, gradient norm clipped to 1.0, --grad-accum micro-batches of --batch
blocks per process per step, DDP through accelerate. The main process prints JSON lines:
{"event": "start", ...} (the data and the weights' missing/unexpected keys), then
{"event": "step", "step", "loss", "lr", "grad_norm", "tokens", "seconds", "tokens_per_s"}
every --log-every steps (loss: mean over processes and over the steps since the last line;
tokens and tokens/s: all processes together, all block tokens counted as `roformer train mlm`
counts them), and {"event": "saved", ...} for each checkpoint written to --out (every
--save-every steps and at the end): model.safetensors and config.json by `save_pretrained`,
plus vocab.txt and tokenizer_config.json copied from --init.

Run it, on one machine with N GPUs:

    accelerate launch --num_processes N scripts/continue_in_pytorch.py \\
        --init RUN/checkpoint --corpus data/chinese-poetry/poems --out RUN-pt \\
        --steps 10000 --batch 64 --lr 3e-4 --warmup 500 --also-simplified

or `torchrun --nproc_per_node N scripts/continue_in_pytorch.py ...` (several machines: the
usual accelerate/torchrun rendezvous options). On CPUs, two processes with gloo (the script
passes cpu=True to accelerate when no GPU is visible; `accelerate launch --multi_gpu
--num_processes 2` works too, but `accelerate launch --cpu --num_processes 2` starts a single
process unless given an MPI hostfile):

    OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node 2 \\
        scripts/continue_in_pytorch.py --init RUN/checkpoint ... --batch 8

From scratch, on a machine without the corpus (how the built-in model's first 120 M tokens were
trained on a lent GPU; experiments/gpu-scaling/README.md): `--from-scratch` takes random weights
of --init's config.json (seeded by --seed), `--blocks FILE.npy` trains on blocks packed
beforehand by scripts/pack_poetry_blocks.py instead of --corpus, and `--eval-blocks FILE.npy`
with `--eval-every N` logs {"event": "eval", "step", "tokens", "loss", "top1", "masked"} on
held-out blocks with fixed masks.

Then `roformer fill-mask --model RUN-pt "床前明月[MASK]，疑是地上霜。"` or
`roformer eval mlm --model RUN-pt ...`.

Needs: torch, transformers, accelerate, safetensors, rjieba (RoFormerTokenizer's word cutter;
without it the script falls back to a BERT tokenizer, see make_tokenizer); for
--also-simplified, `opencc` (preferred: OpenCC's t2s table, which `roformer`'s fast2s also
comes from) or `zhconv` (its own table: the copies differ from ours in a few characters).
"""

import argparse
import hashlib
import inspect
import json
import os
import re
import shutil
import sys
import time
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs, set_seed
from transformers import RoFormerConfig, RoFormerForMaskedLM

try:  # transformers 4.x; in 5.x BertTokenizerFast is BertTokenizer, backed by tokenizers
    from transformers import BertTokenizerFast
except ImportError:  # pragma: no cover
    from transformers import BertTokenizer as BertTokenizerFast

CORPUS_EXTENSIONS = (".json",)
MASK_PROBABILITY, MASK_SHARE, RANDOM_SHARE = 0.15, 0.8, 0.1


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init", required=True, type=Path,
                   help="checkpoint directory written by `roformer train mlm`")
    p.add_argument("--corpus", type=Path, nargs="+",
                   help="chinese-poetry JSON files or directories (searched recursively)")
    p.add_argument("--blocks", type=Path, default=None,
                   help="train on these packed blocks instead of --corpus: an .npy of shape "
                        "[blocks, seq_len] of token ids, as scripts/pack_poetry_blocks.py writes")
    p.add_argument("--docs", type=Path, default=None,
                   help="train on blocks built here from tokenised training documents: an .npz "
                        "as `scripts/pack_poetry_blocks.py --split train-docs` writes; "
                        "--also-simplified, --also-lines and --alone-share apply to them")
    p.add_argument("--alone-share", type=float, default=0.0, metavar="SHARE",
                   help="with --docs: this share of the documents (lines included) gets a "
                        "block of its own, [CLS] doc [SEP] padded, as `roformer train mlm "
                        "--alone-share` (default 0)")
    p.add_argument("--alone-every", type=int, default=0, metavar="N",
                   help="with --alone-share: the lone documents in a stream of their own, cut "
                        "and padded to --alone-seq-len, every Nth step a batch of them with "
                        "as many token slots as a packed batch (0: mixed into the packed "
                        "blocks at --seq-len, as `roformer train mlm` does, where a line of "
                        "7 characters fills a block of 128)")
    p.add_argument("--alone-seq-len", type=int, default=64,
                   help="with --alone-every: tokens per lone block, [CLS] and [SEP] included")
    p.add_argument("--bf16", action="store_true",
                   help="on a GPU: the forward and backward under torch.autocast(bfloat16), "
                        "TF32 matrix products elsewhere; weights, optimiser and loss stay f32")
    p.add_argument("--time-budget-s", type=float, default=0.0,
                   help="fit the schedule to this many seconds of training: after "
                        "--calibrate-steps steps, --steps becomes what the measured speed "
                        "finishes in the budget (0: --steps as given)")
    p.add_argument("--calibrate-steps", type=int, default=60,
                   help="steps timed for --time-budget-s (the first 10 not counted); must be "
                        "below --warmup, which does not depend on --steps")
    p.add_argument("--save-shard-mb", type=int, default=0,
                   help="write model.safetensors in shards of at most this many MB (a device's "
                        "per-file transfer limit); 0: one file")
    p.add_argument("--from-scratch", action="store_true",
                   help="start from random weights of --init's config.json (seeded by --seed) "
                        "instead of its model.safetensors")
    p.add_argument("--eval-blocks", type=Path, default=None,
                   help="held-out blocks (.npy, as --blocks) to report the masked-LM loss and "
                        "top-1 accuracy on, with masks fixed by --seed")
    p.add_argument("--eval-every", type=int, default=0,
                   help="evaluate on --eval-blocks every N steps and at the end (0: at the end)")
    p.add_argument("--eval-max", type=int, default=2048,
                   help="evaluate on at most this many of --eval-blocks (the first ones)")
    p.add_argument("--out", required=True, type=Path, help="output checkpoint directory")
    p.add_argument("--steps", type=int, default=1000, help="optimisation steps")
    p.add_argument("--batch", type=int, default=16, help="blocks per micro-batch per process")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step")
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--seq-len", type=int, default=128,
                   help="tokens per block, [CLS] and [SEP] included")
    p.add_argument("--validation", type=float, default=0.05,
                   help="share of documents held out by text hash, as `roformer train mlm` "
                        "(default 0.05, its default); 0 trains on everything")
    p.add_argument("--also-simplified", action="store_true",
                   help="also train on simplified copies of documents with traditional "
                        "characters (needs opencc or zhconv)")
    p.add_argument("--also-lines", type=float, default=0.0, metavar="SHARE",
                   help="also train on the punctuation-free lines of this share of the "
                        "documents, as `roformer train mlm --also-lines` (default 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=int, default=0,
                   help="also save every N steps (0: at the end only)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--cpu", action="store_true",
                   help="run on CPUs (gloo) even where a GPU is visible; the default on a "
                        "machine without GPUs")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where the tokenised blocks are cached (default: OUT.cache, beside OUT)")
    args = p.parse_args(argv)
    if sum(x is not None for x in (args.corpus, args.blocks, args.docs)) != 1:
        p.error("give exactly one of --corpus, --blocks and --docs")
    if args.alone_share and args.docs is None:
        p.error("--alone-share needs --docs")
    if args.time_budget_s and not 10 < args.calibrate_steps < args.warmup:
        p.error("--time-budget-s needs 10 < --calibrate-steps < --warmup")
    if args.alone_every and not (args.alone_share and 3 <= args.alone_seq_len <= args.seq_len):
        p.error("--alone-every needs --alone-share and 3 <= --alone-seq-len <= --seq-len")
    if not 0.0 <= args.alone_share <= 1.0:
        p.error("--alone-share must be in [0, 1]")
    if args.steps < 1 or args.batch < 1 or args.grad_accum < 1 or args.log_every < 1:
        p.error("--steps, --batch, --grad-accum and --log-every must be at least 1")
    if not 0 <= args.warmup <= args.steps:
        p.error("--warmup must be in [0, --steps]")
    if not 0.0 <= args.also_lines <= 1.0:
        p.error("--also-lines must be in [0, 1]")
    if args.seq_len < 3:
        p.error("--seq-len must be at least 3")
    return args


# ---------------------------------------------------------------- data


def corpus_files(paths):
    files = []
    for path in paths:
        if path.is_dir():
            found = [f for f in path.rglob("*")
                     if f.is_file() and f.suffix in CORPUS_EXTENSIONS
                     and not any(part.startswith(".") for part in f.relative_to(path).parts)]
            files.extend(sorted(found, key=lambda f: str(f)))
        else:
            files.append(path)
    return files


def read_poems(files):
    """One document per poem: its `paragraphs` joined without separator, trimmed."""
    docs = []
    for file in files:
        with open(file, encoding="utf-8") as f:
            items = json.load(f)
        if not isinstance(items, list):
            raise SystemExit(f"{file}: not a JSON array of poems")
        for index, item in enumerate(items):
            lines = item.get("paragraphs") if isinstance(item, dict) else None
            if not isinstance(lines, list) or not all(isinstance(s, str) for s in lines):
                raise SystemExit(f"{file}: element {index} has no `paragraphs` array of strings")
            text = "".join(lines).strip()
            if text:
                docs.append(text)
    return docs


def text_position(text):
    """The document's place in [0, 1), as `roformer` computes it for its validation split: the
    top 53 bits of fmix64(fnv1a64(utf-8 bytes))."""
    mask = (1 << 64) - 1
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & mask
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & mask
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & mask
    h ^= h >> 33
    return (h >> 11) / float(1 << 53)


LINE_ENDS = re.compile("[，。？！；：、,.?!;:]")


def with_lines(docs, share):
    """The documents, then the lines of those chosen by the hash of "lines\\0" + text: runs
    between line-ending marks, trimmed, empty ones left out (`roformer`'s with_lines)."""
    lines = []
    for d in docs:
        if text_position("lines\0" + d) < share:
            lines.extend(part.strip() for part in LINE_ENDS.split(d) if part.strip())
    return docs + lines


def simplifier():
    """A traditional-to-simplified function and its name, or (None, reason)."""
    try:
        import opencc
        converter = opencc.OpenCC("t2s")  # the C++ binding names its configs without .json
        return converter.convert, f"opencc t2s ({getattr(opencc, '__version__', '?')})"
    except Exception as err:  # not installed, or another package under that name
        opencc_error = f"opencc: {type(err).__name__}: {err}"
    try:
        import zhconv
        return (lambda text: zhconv.convert(text, "zh-hans")), "zhconv zh-hans"
    except ImportError as err:
        return None, f"{opencc_error}; zhconv: {err}"


def make_tokenizer(init):
    """The checkpoint's tokenizer, and how it was made.

    `roformer`'s tokenizer is transformers' RoFormerTokenizer: BERT normalisation as
    tokenizer_config.json says (do_lower_case true by default, which also strips accents: NFD,
    so a CJK compatibility ideograph becomes its unified one), jieba words, then WordPiece; with
    a per-character vocabulary every ideograph and every char of a run such as "□□□" is a
    token of its own, an unknown char [UNK]. transformers' RoFormerTokenizer (it needs
    `rjieba`) gives the same ids (checked on 13,204 poems, the 10,204 with any char other than
    a CJK ideograph or common punctuation among them). Without rjieba this falls back to
    BertTokenizerFast(tokenize_chinese_chars=True), which agrees on ideographs and punctuation
    but makes one [UNK] of a run of other symbols ("□□□")."""
    try:
        import rjieba  # noqa: F401  (RoFormerTokenizer's pre-tokenizer)
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(init)
        name = type(tokenizer).__name__
        if "RoFormer" not in name:
            raise ImportError(f"AutoTokenizer gave {name}")
    except ImportError as err:
        print(f"warning: RoFormerTokenizer unavailable ({err}); BertTokenizerFast per char "
              "instead: runs of non-CJK symbols become one [UNK]", file=sys.stderr)
        tokenizer, name = bert_tokenizer(init), "BertTokenizerFast (fallback)"
    tokenizer.model_max_length = 1 << 62  # documents are packed, never truncated
    probe = tokenizer("床前明月光", add_special_tokens=False)["input_ids"]
    if len(probe) != 5 or tokenizer.unk_token_id in probe:
        raise SystemExit(f"the tokenizer did not load {init / 'vocab.txt'}: "
                         f"床前明月光 -> {probe}")
    return tokenizer, name


def bert_tokenizer(init):
    config = {}
    if (init / "tokenizer_config.json").exists():
        config = json.loads((init / "tokenizer_config.json").read_text(encoding="utf-8"))
    options = dict(do_lower_case=config.get("do_lower_case", True),
                   strip_accents=config.get("strip_accents", None), tokenize_chinese_chars=True)
    if "vocab" in inspect.signature(BertTokenizerFast.__init__).parameters:
        # transformers 5 takes the vocabulary itself and silently ignores `vocab_file=`
        # (every token then becomes [UNK]); a later duplicate line wins, as in load_vocab.
        vocab = {}
        with open(init / "vocab.txt", encoding="utf-8") as f:
            for index, line in enumerate(f):
                vocab[line.rstrip("\n")] = index
        return BertTokenizerFast(vocab=vocab, **options)
    return BertTokenizerFast(vocab_file=str(init / "vocab.txt"), **options)


def special_ids(tokenizer):
    ids = {tokenizer.convert_tokens_to_ids(t) for t in
           (tokenizer.pad_token, tokenizer.unk_token, tokenizer.cls_token,
            tokenizer.sep_token, tokenizer.mask_token)}
    return sorted(i for i in ids if i is not None)


def tokenize(tokenizer, docs, chunk=4096):
    out = []
    for start in range(0, len(docs), chunk):
        enc = tokenizer(docs[start:start + chunk], add_special_tokens=False,
                        return_attention_mask=False, return_token_type_ids=False)
        out.extend(enc["input_ids"])
    return out


def pack(token_lists, seq_len, cls_id, sep_id):
    """`roformer`'s packing: the stream d0 [SEP] d1 [SEP] ... cut into bodies of seq_len - 2
    tokens, each block [CLS] body [SEP]; the last partial body is dropped."""
    lengths = np.fromiter((len(t) for t in token_lists if t), dtype=np.int64)
    stream = np.empty(int(lengths.sum()) + len(lengths), dtype=np.int32)
    at = 0
    for ids in token_lists:
        if ids:
            stream[at:at + len(ids)] = ids
            at += len(ids)
            stream[at] = sep_id
            at += 1
    body = seq_len - 2
    count = len(stream) // body
    blocks = np.empty((count, seq_len), dtype=np.int32)
    blocks[:, 0] = cls_id
    blocks[:, 1:-1] = stream[:count * body].reshape(count, body)
    blocks[:, -1] = sep_id
    return blocks


def prepare_blocks(args, tokenizer):
    """Reads, splits, converts, tokenises and packs the training documents."""
    files = corpus_files(args.corpus)
    if not files:
        raise SystemExit(f"no .json corpus files under {[str(p) for p in args.corpus]}")
    docs = read_poems(files)
    train = [d for d in docs if not text_position(d) < args.validation]
    info = {"files": len(files), "documents": len(docs), "train_documents": len(train),
            "held_out_documents": len(docs) - len(train)}
    if args.also_simplified:
        convert, name = simplifier()
        if convert is None:
            info["simplified"] = f"not added: neither opencc nor zhconv is importable ({name})"
            print(f"warning: --also-simplified ignored: {name}", file=sys.stderr)
        else:
            copies = []
            for d in train:
                s = convert(d)
                if s != d:
                    copies.append(s)
            train = train + copies
            info["simplified"] = f"{len(copies)} copies by {name}"
    if args.also_lines > 0:
        before = len(train)
        train = with_lines(train, args.also_lines)
        info["line_documents"] = len(train) - before
    token_lists = tokenize(tokenizer, train)
    blocks = pack(token_lists, args.seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id)
    unk = tokenizer.unk_token_id
    tokens = sum(len(t) for t in token_lists)
    info.update(tokens=tokens, unk_share=sum(t.count(unk) for t in token_lists) / max(tokens, 1),
                blocks=len(blocks))
    return blocks, info


def blocks_from_docs(args, tokenizer):
    """Training blocks from a --docs file, prepared as `roformer train mlm` prepares documents:
    simplified copies appended (ids mapped by the file's `simplified` table; documents that do
    not change give no copy), then the lines (runs between line-ending ids, empty ones left
    out) of an --also-lines share of the documents, then an --alone-share of all of them in
    blocks of their own ([CLS] doc [SEP], cut to --seq-len, or --alone-seq-len with
    --alone-every, and padded with [PAD]) and the rest packed. Returns the blocks, the lone
    blocks when they are a stream of their own (--alone-every), else None, and a summary. `roformer` chooses the lines' and the lone documents' share by a hash of the text;
    here a generator seeded by --seed chooses them, in the same proportions."""
    data = np.load(args.docs)
    tokens, offsets = data["tokens"].astype(np.int32), data["offsets"]
    docs = [tokens[offsets[k]:offsets[k + 1]] for k in range(len(offsets) - 1)]
    docs = [d for d in docs if len(d)]
    info = {"docs_file": str(args.docs), "documents": len(docs)}
    if args.also_simplified:
        table = data["simplified"].astype(np.int32)
        copies = [c for d, c in ((d, table[d]) for d in docs) if not np.array_equal(c, d)]
        docs += copies
        info["simplified"] = f"{len(copies)} copies by the file's id table"
    rng = np.random.default_rng(args.seed)
    if args.also_lines > 0:
        ends = data["line_ends"]
        lines = []
        for d in (d for d, chosen in zip(docs, rng.random(len(docs)) < args.also_lines)
                  if chosen):
            parts = np.split(d, np.flatnonzero(np.isin(d, ends)))
            # every part after the first starts with the mark it was cut at
            lines.extend(p for p in (p if i == 0 else p[1:] for i, p in enumerate(parts)) if len(p))
        docs += lines
        info["line_documents"] = len(lines)
    alone = rng.random(len(docs)) < args.alone_share
    packed = pack([d.tolist() for d, a in zip(docs, alone) if not a], args.seq_len,
                  tokenizer.cls_token_id, tokenizer.sep_token_id)
    lone_len = args.alone_seq_len if args.alone_every else args.seq_len
    lone = [d[:lone_len - 2] for d, a in zip(docs, alone) if a]
    lone_blocks = np.full((len(lone), lone_len), tokenizer.pad_token_id, dtype=np.int32)
    for row, d in zip(lone_blocks, lone):
        row[0], row[1:len(d) + 1], row[len(d) + 1] = tokenizer.cls_token_id, d, tokenizer.sep_token_id
    info.update(tokens=int(sum(len(d) for d in docs)), packed_blocks=len(packed),
                alone_blocks=len(lone_blocks), alone_seq_len=lone_len)
    if args.alone_every:
        return packed, lone_blocks, info
    return np.concatenate([packed, lone_blocks]), None, info


def _file_hash(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def load_blocks(args, tokenizer, accelerator):
    """The training blocks and the lone blocks of --alone-every (or None): --blocks as given,
    built from --docs, or built once from --corpus by the main process and cached under
    --cache-dir."""
    if args.docs is not None:
        t0 = time.time()
        blocks, alone, info = blocks_from_docs(args, tokenizer)
        info["prepare_seconds"] = round(time.time() - t0, 1)
        return blocks, alone, info
    if args.blocks is not None:
        blocks = np.load(args.blocks, mmap_mode="r")
        if blocks.ndim != 2 or blocks.shape[1] != args.seq_len:
            raise SystemExit(f"{args.blocks}: shape {blocks.shape}, expected [blocks, {args.seq_len}]")
        return blocks, None, {"blocks_file": str(args.blocks), "blocks": int(blocks.shape[0]),
                              "tokens": int(blocks.shape[0]) * args.seq_len}
    key = json.dumps({"corpus": [str(p.resolve()) for p in args.corpus], "seq_len": args.seq_len,
                      "validation": args.validation, "simplified": args.also_simplified,
                      "lines": args.also_lines,
                      "vocab": _file_hash(args.init / "vocab.txt"),
                      "tokenizer_config": _file_hash(args.init / "tokenizer_config.json"),
                      "tokenizer": type(tokenizer).__name__},
                     sort_keys=True)
    cache = args.cache_dir or args.out.with_name(args.out.name + ".cache")
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    blocks_path, info_path = cache / f"blocks-{name}.npy", cache / f"blocks-{name}.json"
    with accelerator.main_process_first():
        if accelerator.is_main_process and not blocks_path.exists():
            t0 = time.time()
            blocks, info = prepare_blocks(args, tokenizer)
            info["prepare_seconds"] = round(time.time() - t0, 1)
            cache.mkdir(parents=True, exist_ok=True)
            tmp = cache / f"blocks-{name}.{os.getpid()}.tmp.npy"
            np.save(tmp, blocks)
            os.replace(tmp, blocks_path)
            info_path.write_text(json.dumps(info, ensure_ascii=False))
        blocks = np.load(blocks_path, mmap_mode="r")
        info = json.loads(info_path.read_text())
    info["cache"] = str(blocks_path)
    return blocks, None, info


_ORDER = {}


def epoch_order(count, seed, epoch):
    """The block order of one epoch (kept until the next epoch of the same stream asks for its
    own; two streams, the packed and the lone blocks, keep theirs side by side)."""
    key = (count, seed, epoch)
    if key not in _ORDER:
        for old in [k for k in _ORDER if k[0] == count]:
            del _ORDER[old]
        _ORDER[key] = torch.randperm(count, generator=torch.Generator().manual_seed(
            seed * 1_000_003 + epoch))
    return _ORDER[key]


def micro_batch(blocks, index, batch, rank, world, seed):
    """Global micro-batch `index`: a per-epoch permutation of the blocks (the same on every
    process) cut into global batches of batch * world blocks; this process takes its slice."""
    per_epoch = len(blocks) // (batch * world)
    if per_epoch == 0:
        raise SystemExit(f"{len(blocks)} blocks are fewer than one global batch ({batch * world})")
    epoch, within = divmod(index, per_epoch)
    order = epoch_order(len(blocks), seed, epoch)
    start = within * batch * world + rank * batch
    rows = order[start:start + batch].numpy()
    rows.sort()  # faster reads from the memory map; the rows' order does not matter
    return torch.from_numpy(np.asarray(blocks[rows], dtype=np.int64))


def mask_tokens(ids, specials, mask_id, random_ids, generator):
    """`roformer`'s masking, vectorised: in each row, k = clamp(round(0.15 n), 1, n) of its n
    non-special tokens are chosen uniformly; 80 % of them become [MASK], 10 % a random
    non-special token, 10 % stay. Labels: the original id there, -100 elsewhere."""
    candidate = ~torch.isin(ids, specials)
    n = candidate.sum(dim=1, keepdim=True)
    k = torch.clamp(torch.round(MASK_PROBABILITY * n.double()).long(), min=1)
    k = torch.minimum(k, n)
    scores = torch.rand(ids.shape, generator=generator, device=ids.device)
    scores[~candidate] = 2.0  # after every candidate
    rank = scores.argsort(dim=1).argsort(dim=1)
    chosen = candidate & (rank < k)
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    u = torch.rand(ids.shape, generator=generator, device=ids.device)
    inputs = ids.clone()
    inputs[chosen & (u < MASK_SHARE)] = mask_id
    swap = chosen & (u >= MASK_SHARE) & (u < MASK_SHARE + RANDOM_SHARE)
    draws = random_ids[torch.randint(len(random_ids), ids.shape, generator=generator,
                                     device=ids.device)]
    inputs[swap] = draws[swap]
    return inputs, labels


# ---------------------------------------------------------------- training


@torch.no_grad()
def evaluate(model, blocks, args, specials, mask_id, random_ids, device):
    """Masked-LM loss (mean over masked tokens) and top-1 accuracy on the first --eval-max
    held-out blocks, masked as in training with a generator fixed by --seed, so every
    evaluation of a run, and of runs with the same seed, sees the same masks."""
    model.eval()
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + 104729)
    rows = blocks[:min(len(blocks), args.eval_max)]
    loss_sum, right, count = 0.0, 0, 0
    for start in range(0, len(rows), 256):
        ids = torch.from_numpy(np.asarray(rows[start:start + 256], dtype=np.int64))
        inputs, labels = mask_tokens(ids, specials, mask_id, random_ids, generator)
        inputs, labels = inputs.to(device), labels.to(device)
        logits = model(input_ids=inputs, attention_mask=torch.ones_like(inputs),
                       token_type_ids=torch.zeros_like(inputs)).logits.float()
        chosen = labels != -100
        loss_sum += torch.nn.functional.cross_entropy(
            logits[chosen], labels[chosen], reduction="sum").item()
        right += (logits[chosen].argmax(-1) == labels[chosen]).sum().item()
        count += int(chosen.sum().item())
    model.train()
    return {"loss": loss_sum / max(count, 1), "top1": right / max(count, 1), "masked": count}


def lr_at(step, peak, warmup, total):
    """Learning rate of update `step` (0-based), as `roformer`'s linear schedule."""
    if step < warmup:
        return peak * step / max(warmup, 1)
    if step >= total:
        return 0.0
    return peak * (total - step) / max(total - warmup, 1)


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue  # the fixed sinusoidal table (frozen in main)
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def save(accelerator, model, args, step):
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        args.out.mkdir(parents=True, exist_ok=True)
        shard = {"max_shard_size": f"{args.save_shard_mb}MB"} if args.save_shard_mb else {}
        accelerator.unwrap_model(model).save_pretrained(args.out, **shard)
        for name in ("vocab.txt", "tokenizer_config.json"):
            if (args.init / name).exists():
                shutil.copyfile(args.init / name, args.out / name)
        (args.out / "trainer_state.json").write_text(json.dumps(
            {"step": step, "continued_from": str(args.init), "options": {
                k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}},
            indent=2, default=str))
        print(json.dumps({"event": "saved", "step": step, "path": str(args.out)}), flush=True)
    accelerator.wait_for_everyone()


def synced_clock(device):
    """The time once the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def fit_schedule(args, step, t10, train_start, now, log):
    """--time-budget-s: sets --steps to what the speed since step 10 (at `t10`) finishes
    within the budget, counted from the first step (`train_start`)."""
    per_step = (now - t10) / (step - 10)
    left = args.time_budget_s - (now - train_start)
    args.steps = max(step + 1, step + int(left / per_step))
    log({"event": "schedule", "step": step, "seconds_per_step": per_step, "steps": args.steps,
         "tokens": args.steps * args.batch * args.grad_accum * args.seq_len})


def main(argv=None):
    args = parse_args(argv)
    # accelerate picks gloo for several CPU processes only when told it runs on CPU; without
    # that, each process of a torchrun/`accelerate launch --multi_gpu` on a machine without
    # GPUs would train alone, as if it were the only one.
    on_cpu = args.cpu or not any(available() for available in (
        torch.cuda.is_available, lambda: hasattr(torch, "xpu") and torch.xpu.is_available()))
    # The other processes wait while the main one builds the block cache (minutes).
    patience = InitProcessGroupKwargs(timeout=timedelta(hours=2))
    accelerator = Accelerator(cpu=on_cpu, kwargs_handlers=[patience])
    rank, world = accelerator.process_index, accelerator.num_processes
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if world != launched:
        raise SystemExit(f"launched as {launched} processes but accelerate sees {world} "
                         f"({accelerator.distributed_type}); pass --cpu on a machine without GPUs")
    if args.time_budget_s and world > 1:
        raise SystemExit("--time-budget-s fits the schedule in one process only")
    log = (lambda record: print(json.dumps(record, ensure_ascii=False), flush=True)) \
        if accelerator.is_main_process else (lambda record: None)
    set_seed(args.seed)

    tokenizer, tokenizer_name = make_tokenizer(args.init)
    if args.from_scratch:
        model = RoFormerForMaskedLM(RoFormerConfig.from_pretrained(args.init))
        loading = {}
    else:
        # f32 whatever the file holds (transformers 5 would otherwise keep an f16 file's dtype)
        model, loading = RoFormerForMaskedLM.from_pretrained(args.init, output_loading_info=True,
                                                             dtype=torch.float32)
    loading = {k: sorted(v) if isinstance(v, (set, list)) else str(v) for k, v in loading.items()}
    problems = ("missing_keys", "unexpected_keys", "mismatched_keys")
    if accelerator.is_main_process and any(loading.get(k) for k in problems):
        print(f"warning: weights not loaded as saved: {loading}", file=sys.stderr)
    # The sinusoidal table of the rotary angles is a fixed function of the position (transformers
    # 4 freezes it; 5.23 loads it as a trainable parameter, and `roformer` recomputes it on
    # load, so training it would change nothing but this script's own model).
    for name, param in model.named_parameters():
        if name.endswith("embed_positions.weight"):
            param.requires_grad_(False)
    if len(tokenizer) != model.config.vocab_size:
        raise SystemExit(f"vocab.txt has {len(tokenizer)} tokens, config.json's vocab_size is "
                         f"{model.config.vocab_size}")
    blocks, alone_blocks, data_info = load_blocks(args, tokenizer, accelerator)
    eval_blocks = np.load(args.eval_blocks, mmap_mode="r") if args.eval_blocks else None
    specials = torch.tensor(special_ids(tokenizer))
    random_ids = torch.tensor([i for i in range(len(tokenizer)) if i not in set(specials.tolist())])

    model.train()
    optimizer = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr,
                                  betas=(0.9, 0.999), eps=1e-8,
                                  fused=accelerator.device.type == "cuda")
    model, optimizer = accelerator.prepare(model, optimizer)
    device = accelerator.device
    # masks are drawn where the model runs, so the GPU is not left waiting for the CPU
    mask_gen = torch.Generator(device=device).manual_seed(args.seed * 1_000_003 + 7919 * (rank + 1))
    specials_here, random_here = specials.to(device), random_ids.to(device)
    bf16 = args.bf16 and device.type == "cuda"
    if bf16:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    log({"event": "start", "init": str(args.init), "processes": world,
         "backend": str(accelerator.state.backend), "device": str(device),
         "tokenizer": tokenizer_name,
         "torch": torch.__version__,
         **{k: loading.get(k) for k in problems},
         "parameters": sum(p.numel() for p in accelerator.unwrap_model(model).parameters()
                           if p.requires_grad),
         "global_batch": args.batch * world * args.grad_accum, "seq_len": args.seq_len,
         "bf16_autocast": bf16,
         "data": data_info})

    tokens_per_step = args.batch * world * args.grad_accum * args.seq_len
    window_loss, window_steps, window_start = torch.zeros((), device=device), 0, time.perf_counter()
    train_start, step, packed_index, alone_index = time.perf_counter(), 0, 0, 0
    alone_batch = args.batch * args.seq_len // args.alone_seq_len
    while step < args.steps:
        if args.time_budget_s and step == 10:
            t10 = synced_clock(device)
        if args.time_budget_s and step == args.calibrate_steps:
            fit_schedule(args, step, t10, train_start, synced_clock(device), log)
        lr = lr_at(step, args.lr, args.warmup, args.steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        for micro in range(args.grad_accum):
            if alone_blocks is not None and step % args.alone_every == args.alone_every - 1:
                ids = micro_batch(alone_blocks, alone_index, alone_batch, rank, world, args.seed)
                alone_index += 1
            else:
                ids = micro_batch(blocks, packed_index, args.batch, rank, world, args.seed)
                packed_index += 1
            ids = ids.to(device)
            inputs, labels = mask_tokens(ids, specials_here, tokenizer.mask_token_id,
                                         random_here, mask_gen)
            last = micro == args.grad_accum - 1
            autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else nullcontext()
            with nullcontext() if last else accelerator.no_sync(model), autocast:
                out = model(input_ids=inputs, attention_mask=(ids != tokenizer.pad_token_id).long(),
                            token_type_ids=torch.zeros_like(inputs), labels=labels)
                accelerator.backward(out.loss / args.grad_accum)
            window_loss += out.loss.detach() / args.grad_accum
        grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        window_steps += 1
        step = done = step + 1
        if done % args.log_every == 0 or done == args.steps:
            loss = accelerator.reduce(window_loss, reduction="mean").item() / window_steps
            seconds = time.perf_counter() - window_start
            log({"event": "step", "step": done, "loss": loss, "lr": lr,
                 "grad_norm": float(grad_norm), "tokens": tokens_per_step * window_steps,
                 "seconds": seconds, "tokens_per_s": tokens_per_step * window_steps / seconds})
            window_loss.zero_()
            window_steps, window_start = 0, time.perf_counter()
        if eval_blocks is not None and (done == args.steps or (
                args.eval_every and done % args.eval_every == 0)):
            result = evaluate(accelerator.unwrap_model(model), eval_blocks, args, specials,
                              tokenizer.mask_token_id, random_ids, device)
            log({"event": "eval", "step": done, "tokens": tokens_per_step * done, **result})
        if args.save_every and done % args.save_every == 0 and done != args.steps:
            save(accelerator, model, args, done)
    save(accelerator, model, args, args.steps)
    accelerator.end_training()


if __name__ == "__main__":
    main()
