#!/usr/bin/env python3
"""Golden fixtures for the RoFormer tokenizer (crates/roformer/src/tokenizer/).

Run with the peers virtualenv (transformers 5.23, tokenizers 0.23, rjieba 0.2.2):

    ~/.cache/roformer-peers/venv/bin/python scripts/make_tokenizer_fixtures.py

Writes, under crates/roformer/tests/fixtures/tokenizer/:
  vocab.txt              a small hand-made vocabulary (not a copy of any real one)
  tokenizer_config.json  the default configuration, so the directory loads like a checkpoint
  cases.json             what transformers' RoFormerTokenizer returns for each test input

How the reference tokenizer is built. transformers 5.23 builds RoFormerTokenizer from a
directory holding only vocab.txt by handing the vocab *file path* (a str) to both
`models.WordPiece` and `JiebaPreTokenizer`; the latter then tests `word in self.vocab` as a
substring test on the path, so no jieba word is ever kept whole (unless it happens to be part of
the path). A directory that also holds tokenizer.json (what `save_pretrained` writes) is loaded
with the vocab as a dict, which is the behaviour RoFormerTokenizerFast had in transformers 4.x
and the one the class intends. The fixtures use that dict route: the vocab.txt-only directory
is saved with `save_pretrained` and loaded again. The script checks that this equals
`RoFormerTokenizer(vocab=WordPiece.read_file(vocab.txt), ...)` and records, per case, whether
the vocab.txt-only route would have given other ids (`path_route_differs`).
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

import rjieba
import tokenizers
import transformers
from tokenizers import models
from transformers import RoFormerTokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "roformer" / "tests" / "fixtures" / "tokenizer"

# Special tokens are not at the front, so that no test can pass by assuming BERT's ids.
VOCAB = (
    ["[PAD]", "的", "是", "不", "有", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # Single CJK characters.
    + list("今天气非常好我们在北京大学习自然语言处理爱和深度模型年发布电话中文人工智能机器买了一件恤你这个上下来去全角空格编程卡拉")
    # Multi-character words that jieba (no HMM) produces, so they are kept whole.
    + ["今天", "天气", "非常", "我们", "北京", "学习", "自然", "处理", "深度", "模型", "发布", "电话",
       "人工智能", "机器", "编程", "一件", "卡拉"]
    # Full-width and CJK punctuation.
    + ["。", "，", "！", "？", "：", "（", "）", "、"]
    # English words and WordPiece continuations.
    + ["hello", "world", "wor", "##ld", "the", "quick", "brown", "fox", "jump", "##s", "##ed",
       "over", "lazy", "dog ", "python", "and", "un", "##know", "##n", "caf", "##e", "##é",
       "naive", "i", "##̇", "stan", "##bul", "ok", "net", "c", "##+", "gpt", "a", "##a", "Hello",
       "World", "σ", "##α", "##σ", "ss", "ß", "x", "##x"]
    # Digits.
    + [str(d) for d in range(10)] + ["##" + str(d) for d in range(10)] + ["2023", "010"]
    # ASCII punctuation.
    + list(".,!?-:()'#+%&_")
    + ["😀"]
    # A duplicate: transformers keeps the last id for the token, the earlier id decodes to nothing.
    + ["好"]
)

CONFIGS = {
    "default": {},
    "cased": {"do_lower_case": False},
    "lower_keep_accents": {"do_lower_case": True, "strip_accents": False},
}

SINGLE = [
    # Chinese
    ("default", "今天天气非常好。"),
    ("default", "我们在北京大学学习自然语言处理。"),
    ("default", "人工智能和机器学习"),
    ("default", "我买了一件T恤，你呢？"),
    ("default", "卡拉OK"),
    # English: case folding and accents
    ("default", "Hello World"),
    ("default", "HELLO, world!"),
    ("default", "The quick brown fox jumped over the lazy dog."),
    ("default", "unknown worlds"),
    ("default", "Héllo Wörld café naïve"),
    ("default", "İstanbul"),
    ("default", "ΣΑΣ straße"),
    ("default", "a\u0316\u0301b e\u0301"),
    ("cased", "Hello World hello"),
    ("cased", "café Café"),
    ("lower_keep_accents", "Café HÉLLO"),
    # Mixed
    ("default", "我爱Python和深度学习"),
    ("default", "GPT-4模型在2023年发布"),
    ("default", "c++和c#编程.net"),
    ("default", "e.g. U.S.A."),
    # Digits
    ("default", "12345"),
    ("default", "3.14159"),
    ("default", "电话：010-12345678"),
    ("default", "２０２３年"),
    # Emoji
    ("default", "😀"),
    ("default", "我爱😀你👍🏽"),
    ("default", "🥰 👨‍👩‍👧"),
    # Whitespace variants
    ("default", "hello\tworld"),
    ("default", "hello\nworld"),
    ("default", "a\r\nb"),
    ("default", "hello\u00a0world"),
    ("default", "hello\u200bworld"),
    ("default", "  leading and trailing  "),
    ("default", "\u3000全角空格"),
    ("default", "中\t文\u2028上\u2003下"),
    ("default", "   "),
    # Control characters
    ("default", "a\x00b\x01c"),
    ("default", "\ufffd\x7f\u200b"),
    ("default", "abc\x07def\u00adx"),
    # Unknown words, word length limit
    ("default", "supercalifragilistic ελληνικά 한국어 にほんご"),
    ("default", "a" * 100),
    ("default", "a" * 101),
    ("default", "𠀀𪜀"),
    # Special tokens inside the text
    ("default", "今天[MASK]好"),
    ("default", "今天 [MASK] 好"),
    ("default", "[mask] [CLS]x[SEP][MASK][MASK]"),
    # Empty
    ("default", ""),
]

PAIRS = [
    ("default", "今天天气非常好", "我们去北京", None),
    ("default", "hello", "", None),
    ("default", "", "world", None),
    ("default", "The quick brown fox", "jumped over the lazy dog", 12),
    ("default", "今天天气非常好。", "hi", 8),
    ("default", "a b c d e f g", "x x x x x x x x x x", 9),
]

TRUNCATED = [
    ("default", "The quick brown fox jumped over the lazy dog.", 7),
    ("default", "今天天气非常好", 2),
    ("default", "hello", 3),
]

BATCHES = [
    ("default", ["今天", "hello world foo", ""]),
]

DECODE_TEXTS = [
    ("default", "今天天气非常好。Hello, world! jumped [MASK] x"),
    ("default", "unknown worlds ."),
]


def build(config_name, tmp):
    """The reference tokenizer (dict route) and the vocab.txt-only one, for one configuration."""
    plain = Path(tmp) / f"{config_name}-vocab-only"
    plain.mkdir()
    shutil.copy(OUT / "vocab.txt", plain / "vocab.txt")
    (plain / "tokenizer_config.json").write_text(json.dumps(CONFIGS[config_name]))
    saved = Path(tmp) / f"{config_name}-saved"
    # save_pretrained itself rebuilds the pre-tokenizer with the vocab dict: save a separate copy.
    RoFormerTokenizer.from_pretrained(str(plain)).save_pretrained(str(saved))
    path_route = RoFormerTokenizer.from_pretrained(str(plain))
    reference = RoFormerTokenizer.from_pretrained(str(saved))
    direct = RoFormerTokenizer(vocab=models.WordPiece.read_file(str(OUT / "vocab.txt")), **CONFIGS[config_name])
    return reference, direct, path_route


def encoded(tok, text, pair=None, max_length=None):
    kwargs = {"return_offsets_mapping": True, "return_token_type_ids": True, "return_attention_mask": True}
    if max_length is not None:
        kwargs.update(truncation=True, max_length=max_length)
    enc = tok(text, pair, **kwargs) if pair is not None else tok(text, **kwargs)
    return {
        "input_ids": enc["input_ids"],
        "tokens": tok.convert_ids_to_tokens(enc["input_ids"]),
        "offsets": [list(o) for o in enc["offset_mapping"]],
        "token_type_ids": enc["token_type_ids"],
        "attention_mask": enc["attention_mask"],
    }


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    assert len(set(VOCAB)) == len(VOCAB) - 1, "exactly one intended duplicate"
    (OUT / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (OUT / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "tokenizer_class": "RoFormerTokenizer"}, indent=2) + "\n"
    )

    cases = []
    differs = 0
    with tempfile.TemporaryDirectory() as tmp:
        toks = {name: build(name, tmp) for name in CONFIGS}

        def add(kind, config, args, expected, path_expected):
            nonlocal differs
            d = expected != path_expected
            differs += d
            cases.append({"kind": kind, "config": config, **args, **expected, "path_route_differs": d})

        for config, text in SINGLE:
            ref, direct, path = toks[config]
            exp = encoded(ref, text)
            assert exp == encoded(direct, text), text
            add("single", config, {"text": text}, exp, encoded(path, text))
        for config, text, max_length in TRUNCATED:
            ref, direct, path = toks[config]
            exp = encoded(ref, text, max_length=max_length)
            assert exp == encoded(direct, text, max_length=max_length), text
            add("single", config, {"text": text, "max_length": max_length}, exp,
                encoded(path, text, max_length=max_length))
        for config, a, b, max_length in PAIRS:
            ref, direct, path = toks[config]
            exp = encoded(ref, a, b, max_length)
            assert exp == encoded(direct, a, b, max_length), (a, b)
            args = {"text": a, "text_pair": b}
            if max_length is not None:
                args["max_length"] = max_length
            add("pair", config, args, exp, encoded(path, a, b, max_length))
        for config, texts in BATCHES:
            ref, _, path = toks[config]
            kw = {"padding": True, "return_offsets_mapping": True, "return_token_type_ids": True}
            enc = ref(texts, **kw)
            exp = {
                "input_ids": enc["input_ids"],
                "tokens": [ref.convert_ids_to_tokens(ids) for ids in enc["input_ids"]],
                "offsets": [[list(o) for o in offs] for offs in enc["offset_mapping"]],
                "token_type_ids": enc["token_type_ids"],
                "attention_mask": enc["attention_mask"],
            }
            add("batch", config, {"texts": texts}, exp, {**exp, "input_ids": path(texts, **kw)["input_ids"]})
        for config, text in DECODE_TEXTS:
            ref, _, _ = toks[config]
            ids = ref(text)["input_ids"]
            # The duplicate's shadowed id (dropped), an ordinary token after [SEP], a continuation, and
            # [UNK] and [PAD] (special: skipped with skip_special_tokens).
            ids = ids + [VOCAB.index("好"), VOCAB.index("[unused1]"), VOCAB.index("##ld"), VOCAB.index("[UNK]"),
                         VOCAB.index("[PAD]")]
            for skip in (False, True):
                cases.append({"kind": "decode", "config": config, "ids": ids, "skip_special_tokens": skip,
                              "decoded": ref.decode(ids, skip_special_tokens=skip)})
        for token in ["##ld", "[MASK]", "hello", "。"]:
            ref, _, _ = toks["default"]
            tid = ref.convert_tokens_to_ids(token)
            cases.append({"kind": "decode", "config": "default", "ids": [tid], "skip_special_tokens": False,
                          "decoded": ref.decode([tid])})

    header = {
        "generated_by": "scripts/make_tokenizer_fixtures.py",
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "rjieba": getattr(rjieba, "__version__", "0.2.2"),
        "configs": CONFIGS,
        "mask_token_id": VOCAB.index("[MASK]"),
    }
    lines = ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases)
    text = '{"header": ' + json.dumps(header, ensure_ascii=False) + ',\n"cases": [\n' + lines + "\n]}\n"
    (OUT / "cases.json").write_text(text, encoding="utf-8")
    print(f"{len(cases)} cases written to {OUT}; the vocab.txt-only route of transformers "
          f"{transformers.__version__} differs on {differs} of them")


if __name__ == "__main__":
    main()
