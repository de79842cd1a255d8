#!/usr/bin/env python3
"""Writes the couplets of the Three Hundred Tang Poems that the training corpus lacks, as a
chinese-poetry JSON file (one document per couplet) that `scripts/fetch_chinese_poetry.sh`
links into the corpus as `poems/variants/`.

Why: the anthology (`dist/mengxue/tangshisanbaishou.json`) gives many poems in the forms
people learn, and the corpus (`quantangshi`, the 全唐詩 texts) in older ones: it has
牀前看月光…舉頭望山月 and never 床前明月光…舉頭望明月. A couplet of the anthology counts as
present when its text, converted to simplified characters (zhconv) and stripped of
punctuation and whitespace, is a substring of the corpus's Tang poems converted the same way;
the rest (about a sixth) are written out, each once. Couplets already present are not
written, so nothing of the anthology is seen twice; the poems they come from keep their
corpus form.

The couplets are cut as `roformer eval mlm --famous` cuts them (editorial notes in brackets
dropped, whitespace removed, a couplet ends at 。！？；). Usage (the peers venv, for zhconv):

    ~/.cache/roformer-peers/venv/bin/python scripts/anthology_gaps.py \\
        --package data/chinese-poetry-2.0.1 --out scripts/corpus-gaps/tangshisanbaishou-gaps.json
"""

import argparse
import json
import re
from pathlib import Path

NOTE = re.compile(r"[（(][^）)]*[）)]")
PUNCTUATION = re.compile(r"[，。！？；、：,.!?;:\s]")


def comparable(text):
    """`text` in simplified characters without punctuation or whitespace."""
    import zhconv  # here, so that `couplets` imports without it (scripts/famous_split.sh)

    return PUNCTUATION.sub("", zhconv.convert(text, "zh-cn"))


def couplets(paragraphs):
    """The poem's couplets, cut as `eval mlm --famous` cuts them."""
    text = re.sub(r"\s", "", NOTE.sub("", "".join(paragraphs)))
    return [c for c in re.split(r"(?<=[。！？；!?;])", text) if c]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", type=Path, default=Path("data/chinese-poetry-2.0.1"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dist = args.package / "dist"
    tang = []
    for file in sorted((dist / "quantangshi").glob("poet.tang.*.json")):
        tang.extend("".join(p.get("paragraphs", [])) for p in json.loads(file.read_text("utf-8")))
    corpus = comparable("\n".join(tang))
    anthology = json.loads((dist / "mengxue" / "tangshisanbaishou.json").read_text("utf-8"))
    gaps, total = [], 0
    for section in anthology["content"]:
        for poem in section["content"]:
            for couplet in couplets(poem["paragraphs"]):
                total += 1
                if comparable(couplet) not in corpus:
                    gaps.append({"title": poem["chapter"], "author": poem["author"],
                                 "paragraphs": [couplet]})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(gaps, ensure_ascii=False, indent=0) + "\n", "utf-8")
    print(f"{len(gaps)} of {total} couplets of the anthology are not in the corpus: {args.out}")


if __name__ == "__main__":
    main()
