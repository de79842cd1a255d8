#!/usr/bin/env python3
"""Reference fixtures for the LLaMA crate (crates/llama) on SmolLM2-135M-Instruct (Q4_1 GGUF).

Makes crates/llama/tests/fixtures/smollm2.json from data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
(fetched by scripts/fetch_smollm2.sh), using two references:

* llama.cpp (through llama-cpp-python, `Llama(..., vocab_only=True)`) for the token ids: the
  reference GGUF runtime, which knows the "smollm" pre-tokenizer. When llama_cpp cannot be
  imported the ids come from transformers' GGUF tokenizer instead and the file says
  `"ids_source": "transformers"`.
* transformers (`LlamaForCausalLM`, which dequantises the GGUF to float32) for logits, greedy
  continuations, the un-permuted q/k projection weights and the config.

Run from the repository root (CPU only, about two minutes):

    HF_HUB_OFFLINE=1 ~/.cache/roformer-peers/venv/bin/python scripts/make_llama_fixtures.py

Options: --gguf PATH (the model), --out PATH (the JSON written).

Contents (keys sorted, floats written as the shortest decimal that reads back as the same f32;
`logsumexp` is an f64 and written as the shortest decimal for that f64):

* gguf_sha256, ids_source, versions (torch, transformers, gguf, llama_cpp when used)
* config: what transformers' config reports for the model
* prompts: [{text, ids, ids_transformers, ids_match}]; ids without BOS (add_bos_token is false),
  special tokens (<|im_start|>, <|im_end|>) parsed as such
* columns: 48 vocab ids, [0, 1, 2] + range(3, 49152, 1117)
* logits: [{text, ids, rows, argmax, max, logsumexp}], one entry per position in each list;
  rows[p][j] is the logit of vocab id columns[j] after ids[..=p]
* greedy: [{text, ids, new_ids, new_text, stopped_at_eos}], transformers' greedy generate
  (do_sample=False, max_new_tokens=32) after ids; where it stopped at eos early, also
  new_ids_no_stop / new_text_no_stop (32 argmax tokens, eos fed back) and a note
* projections: {"layers.L.q_proj": {shape, first_columns}, ...} for L in 0 and 29:
  self_attn.{q,k}_proj.weight[:, :4] in Hugging Face layout (rotate-half RoPE, i.e. after
  transformers un-permutes llama.cpp's interleaved GGUF layout)
"""

import argparse
import hashlib
import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GGUF = ROOT / "data" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = ROOT / "crates" / "llama" / "tests" / "fixtures" / "smollm2.json"

FRANCE = "The capital of France is"
CHAT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
NUMBERS = "In 2024, 3.14 x 100 = 314!"
UNICODE = "Café naïve — 東京 😀"
CODE = "def f(x):\n    return x**2\n"
STORY = "Once upon a time"
# Non-ASCII numerals: llama.cpp's "smollm" pre-tokenizer splits every \p{N} off on its own (so a
# space before one stays a separate token); transformers' GGUF tokenizer lacks that step.
NUMERALS = "Powers x² and y³, half ½, Arabic ١٢٣, Roman Ⅻ"

PROMPTS = [FRANCE, CHAT, NUMBERS, UNICODE, CODE, STORY, NUMERALS]
LOGIT_PROMPTS = [FRANCE, CHAT, CODE]
GREEDY_PROMPTS = [FRANCE, CHAT, STORY]
MAX_NEW_TOKENS = 32
PROJECTION_LAYERS = [0, 29]
PROJECTION_COLUMNS = 4


def vocab_columns(vocab_size):
    """48 fixed vocab ids: the three specials, then 45 spread evenly up to the last id."""
    cols = [0, 1, 2] + list(range(3, vocab_size, 1117))
    assert len(cols) == 48 and cols[-1] == vocab_size - 1, (len(cols), cols[-1])
    return cols


def f32(x):
    """A Python float whose repr is the shortest decimal that reads back as the same float32."""
    x32 = np.float32(x)
    if not np.isfinite(x32):
        raise ValueError(f"non-finite value {x32}")
    short = float(str(x32))  # numpy prints the shortest digits that round-trip the float32
    if np.float32(float(repr(short))) != x32:  # never seen; keep exactness over brevity
        short = float(x32)
    return short


def f32_list(values):
    return [f32(v) for v in np.asarray(values, dtype=np.float32).reshape(-1)]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def llama_cpp_tokenizer(gguf):
    """(text -> ids via llama.cpp, llama_cpp version), or (None, None) without llama_cpp."""
    try:
        import llama_cpp
    except ImportError as e:
        print(f"llama_cpp not importable ({e}); ids come from transformers", file=sys.stderr)
        return None, None
    llm = llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)

    def tokenize(text):
        return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)]

    return tokenize, llama_cpp.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()

    import gguf as gguf_pkg
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    gguf_dir, gguf_name = str(args.gguf.parent), args.gguf.name

    versions = {
        "gguf": gguf_pkg.__version__ if hasattr(gguf_pkg, "__version__") else _dist_version("gguf"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }

    lc_tokenize, lc_version = llama_cpp_tokenizer(args.gguf)
    if lc_version is not None:
        versions["llama_cpp"] = lc_version

    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
    model.eval()
    cfg = model.config
    eos = cfg.eos_token_id

    def hf_ids(text):
        return [int(t) for t in tok(text, add_special_tokens=False)["input_ids"]]

    prompts = []
    ids_of = {}
    for text in PROMPTS:
        ids_tf = hf_ids(text)
        ids = lc_tokenize(text) if lc_tokenize else ids_tf
        ids_of[text] = ids
        prompts.append({"text": text, "ids": ids, "ids_transformers": ids_tf, "ids_match": ids == ids_tf})
        if ids != ids_tf:
            print(f"TOKENIZATION DIFFERS for {text!r}:\n  llama.cpp    {ids}\n  transformers {ids_tf}",
                  file=sys.stderr)

    columns = vocab_columns(cfg.vocab_size)
    col_index = torch.tensor(columns)

    logits_out = []
    with torch.no_grad():
        for text in LOGIT_PROMPTS:
            ids = ids_of[text]
            x = torch.tensor([ids])
            logits = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits[0]
            assert logits.dtype == torch.float32 and logits.shape == (len(ids), cfg.vocab_size)
            lse = torch.logsumexp(logits.double(), dim=-1)
            mx, am = logits.max(dim=-1)
            logits_out.append({
                "text": text,
                "ids": ids,
                "rows": [f32_list(row) for row in logits[:, col_index]],
                "argmax": [int(a) for a in am],
                "max": f32_list(mx),
                "logsumexp": [float(v) for v in lse],
            })

    greedy_out = []
    with torch.no_grad():
        for text in GREEDY_PROMPTS:
            ids = ids_of[text]
            x = torch.tensor([ids])
            out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                 max_new_tokens=MAX_NEW_TOKENS, pad_token_id=eos)
            new_ids = [int(t) for t in out[0, len(ids):]]
            stopped = len(new_ids) < MAX_NEW_TOKENS
            entry = {
                "text": text,
                "ids": ids,
                "new_ids": new_ids,
                "new_text": tok.decode(new_ids, skip_special_tokens=False),
                "stopped_at_eos": stopped,
            }
            if stopped:
                assert new_ids[-1] == eos, new_ids
                # Also 32 tokens from a plain argmax loop that feeds eos back like any other token
                # (no stopping), for runtimes that do not stop at eos. Full recompute each step.
                seq = list(ids)
                for _ in range(MAX_NEW_TOKENS):
                    y = torch.tensor([seq])
                    step = model(input_ids=y, attention_mask=torch.ones_like(y), use_cache=False)
                    seq.append(int(step.logits[0, -1].argmax()))
                no_stop = seq[len(ids):]
                assert no_stop[:len(new_ids)] == new_ids, (no_stop, new_ids)
                entry["new_ids_no_stop"] = no_stop
                entry["new_text_no_stop"] = tok.decode(no_stop, skip_special_tokens=False)
                entry["note"] = ("generate stopped at eos (<|im_end|>, id %d) after %d tokens; "
                                 "new_ids_no_stop: %d greedy tokens from an argmax loop that feeds eos "
                                 "back and goes on" % (eos, len(new_ids), MAX_NEW_TOKENS))
            greedy_out.append(entry)
            print(f"greedy {text!r} -> {entry['new_text']!r}", file=sys.stderr)

    projections = {}
    for layer in PROJECTION_LAYERS:
        attn = model.model.layers[layer].self_attn
        for name in ("q_proj", "k_proj"):
            w = getattr(attn, name).weight.detach().float()
            projections[f"layers.{layer}.{name}"] = {
                "shape": list(w.shape),
                "first_columns": [f32_list(row) for row in w[:, :PROJECTION_COLUMNS]],
            }

    rope = getattr(cfg, "rope_parameters", None) or {}
    rope_theta = rope.get("rope_theta", getattr(cfg, "rope_theta", None))
    config = {
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "num_attention_heads": cfg.num_attention_heads,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads),
        "rms_norm_eps": f32(cfg.rms_norm_eps),
        "rope_theta": float(rope_theta),
        "tie_word_embeddings": bool(cfg.tie_word_embeddings),
        "vocab_size": cfg.vocab_size,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
    }

    fixture = {
        "gguf_file": gguf_name,
        "gguf_sha256": sha256(args.gguf),
        "ids_source": "llama.cpp" if lc_tokenize else "transformers",
        "versions": versions,
        "transformers_version": versions["transformers"],
        "torch_version": versions["torch"],
        "config": config,
        "prompts": prompts,
        "columns": columns,
        "logits": logits_out,
        "greedy": greedy_out,
        "projections": projections,
    }
    if lc_version is not None:
        fixture["llama_cpp_version"] = lc_version

    args.out.parent.mkdir(parents=True, exist_ok=True)
    # Sorted keys; one line per list of scalars keeps the file small yet diffable.
    text = _pretty(fixture)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text.encode('utf-8'))} bytes)", file=sys.stderr)


def _dist_version(name):
    from importlib.metadata import version
    return version(name)


def _pretty(obj, indent=0):
    """JSON with sorted keys, indented objects and lists of lists, but lists of scalars on one line."""
    pad = "  " * (indent + 1)
    end = "  " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {_pretty(obj[k], indent + 1)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + end + "}" + ("\n" if indent == 0 else "")
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        items = [f"{pad}{_pretty(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + end + "]"
    if isinstance(obj, float):
        assert math.isfinite(obj)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) if isinstance(obj, list) \
        else json.dumps(obj, ensure_ascii=False)


if __name__ == "__main__":
    main()
