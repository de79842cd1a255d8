#!/usr/bin/env python3
"""Checks that checkpoint directories written by our Rust code load in transformers and give the
same logits there.

Run with the peers virtualenv (transformers 5.23, torch, safetensors, rjieba; see
../shared/peers/setup.sh), offline:

    HF_HUB_OFFLINE=1 ~/.cache/roformer-peers/venv/bin/python scripts/check_hf_roundtrip.py \\
        DIR [DIR ...] --json report.json [--tol 1e-4] [--strict]

Each DIR must hold what our Rust side writes:

* config.json whose `architectures[0]` is RoFormerForMaskedLM, RoFormerForSequenceClassification
  or BertForMaskedLM (RoFormer-V2, `norm_type: rms_norm`, is not in transformers and is refused,
  as are `position_embedding_type` "alibi" and "t5_relative", this project's own);
* model.safetensors (or a model.safetensors.index.json and its shards) with the metadata
  {"format": "pt"};
* vocab.txt and tokenizer_config.json;
* inputs.safetensors: input_ids, and optionally attention_mask and token_type_ids (int64);
* ours.safetensors: expected_logits, the logits our Rust model gives on those inputs.

Per directory the script loads the model with `<Architecture>.from_pretrained(DIR,
output_loading_info=True, dtype=float32, ignore_mismatched_sizes=True)`, runs it in eval mode on
the inputs and compares its logits with expected_logits (max |diff| <= --tol, default 1e-4); it
also loads the tokenizer with RoFormerTokenizer (model_type roformer) or BertTokenizer (bert) and
encodes a short text. A directory passes when:

* every key transformers reports missing is one it rebuilds itself ("allowed_missing"): the tied
  weights it declares in `_tied_weights_keys` (the MLM decoder weight and bias) and RoFormer's
  frozen sinusoidal table `roformer.encoder.embed_positions.weight`, which `_init_weights`
  recomputes. For a checkpoint transformers 5.23 saved itself the missing list is empty for all
  three architectures (it writes embed_positions and leaves the tied decoder out, and a left-out
  tied key is never reported); a checkpoint without embed_positions reports exactly that key.
  With --strict nothing may be missing (what transformers' own checkpoints give);
* no key is unexpected or has a mismatched shape, and transformers reports no error messages;
* the safetensors metadata says {"format": "pt"};
* the logits agree within --tol, with the same shape;
* the tokenizer loads, and its largest id is below the config's vocab_size.

Writes the JSON report given by --json: {"ok": all passed, "transformers": version, "tol": ...,
"dirs": [{"dir", "architecture", "missing", "unexpected", "mismatched", "allowed_missing",
"disallowed_missing", "error_msgs", "metadata", "max_abs_diff", "logits_shape", "tokenizer",
"errors", "ok"}, ...]}, and prints one line per directory. Exit status 1 when any directory
fails.

Note: RoFormerTokenizer.from_pretrained on a directory with vocab.txt but no tokenizer.json
hands jieba the vocab *path* instead of the vocab (see make_tokenizer_fixtures.py), so jieba
words are split into characters in "sample_tokens"; that is transformers' behaviour, not ours.
"""

import argparse
import json
import sys
import traceback
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file

ARCHITECTURES = {
    "RoFormerForMaskedLM": ("roformer", "RoFormerTokenizer"),
    "RoFormerForSequenceClassification": ("roformer", "RoFormerTokenizer"),
    "BertForMaskedLM": ("bert", "BertTokenizer"),
}
# Position types of this project's own, which transformers' RoFormer has not (it ignores the
# config field, so it would load such a checkpoint as a rotary model and give other logits).
OURS_ONLY_POSITIONS = {
    "alibi": "ALiBi's attention bias is this project's own",
    "t5_relative": "the T5 relative bias (roformer.encoder.relative_attention_bias.weight) is "
                   "this project's own",
}
SAMPLE_TEXT = "今天天气非常好。Hello world!"
REQUIRED_FILES = ("config.json", "vocab.txt", "tokenizer_config.json", "inputs.safetensors",
                  "ours.safetensors")


def safetensors_files(d):
    single = d / "model.safetensors"
    if single.exists():
        return [single]
    index = d / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [d / s for s in shards]
    raise FileNotFoundError(f"{d}: no model.safetensors nor model.safetensors.index.json")


def rebuilt_keys(model):
    """The state-dict keys transformers fills in by itself when a checkpoint lacks them: the tied
    weights the class declares, and the frozen sinusoidal position tables (RoFormer)."""
    tied = getattr(model, "_tied_weights_keys", None) or {}
    keys = set(tied)
    for name, module in model.named_modules():
        if type(module).__name__ == "RoFormerSinusoidalPositionalEmbedding":
            keys.add(f"{name}.weight")
    return keys


def check_tokenizer(d, tokenizer_class, vocab_size):
    cls = getattr(transformers, tokenizer_class)
    tok = cls.from_pretrained(str(d))
    ids = tok(SAMPLE_TEXT)["input_ids"]
    vocab = tok.get_vocab()
    max_id = max(vocab.values())
    config_path = d / "tokenizer_config.json"
    declared = json.loads(config_path.read_text()).get("tokenizer_class") if config_path.exists() else None
    return dict(
        cls=tokenizer_class,
        declared_class=declared,
        vocab_entries=len(vocab),
        max_id=max_id,
        sample=SAMPLE_TEXT,
        sample_tokens=tok.convert_ids_to_tokens(ids),
        sample_ids=ids,
        ok=max_id < vocab_size,
    )


def check_dir(d, tol, strict, report):
    """Fills `report` (a dict with dir, ok=False and errors=[]) in place, so that what was found
    before an exception stays in it."""
    errors = report["errors"]
    absent = [f for f in REQUIRED_FILES if not (d / f).exists()]
    if absent:
        errors.append(f"missing files: {absent}")
    config = json.loads((d / "config.json").read_text())
    arch = (config.get("architectures") or [None])[0]
    report["architecture"] = arch
    if arch not in ARCHITECTURES:
        errors.append(f"architecture {arch!r} is not one of {sorted(ARCHITECTURES)}")
        return
    model_type, tokenizer_class = ARCHITECTURES[arch]
    if config.get("model_type") != model_type:
        errors.append(f"model_type {config.get('model_type')!r}, expected {model_type!r} for {arch}")
    if config.get("norm_type", "layer_norm") != "layer_norm":
        errors.append(f"norm_type {config['norm_type']!r}: RoFormer-V2 is not in transformers")
        return
    position = config.get("position_embedding_type")
    if position in OURS_ONLY_POSITIONS:
        errors.append(f"position_embedding_type {position!r}: {OURS_ONLY_POSITIONS[position]}; "
                      "transformers' RoFormer ignores the field and would run rotary attention")
        return

    metadata = {}
    for f in safetensors_files(d):
        with safe_open(f, "pt") as st:
            metadata[f.name] = st.metadata()
    report["metadata"] = metadata
    for name, meta in metadata.items():
        if (meta or {}).get("format") != "pt":
            errors.append(f"{name}: metadata {meta!r}, expected format 'pt'")

    cls = getattr(transformers, arch)
    model, info = cls.from_pretrained(
        str(d),
        output_loading_info=True,
        dtype=torch.float32,
        ignore_mismatched_sizes=True,
    )
    model.eval()
    allowed = set() if strict else rebuilt_keys(model)
    missing = sorted(info.get("missing_keys", []))
    report["missing"] = missing
    report["unexpected"] = sorted(info.get("unexpected_keys", []))
    report["mismatched"] = sorted(
        [str(x) for x in m] if isinstance(m, (tuple, list)) else [str(m)]
        for m in info.get("mismatched_keys", [])
    )
    report["error_msgs"] = [str(e) for e in info.get("error_msgs", [])]
    report["allowed_missing"] = sorted(allowed)
    report["disallowed_missing"] = [k for k in missing if k not in allowed]
    for what in ("disallowed_missing", "unexpected", "mismatched", "error_msgs"):
        if report[what]:
            errors.append(f"{what}: {report[what]}")

    inputs = load_file(str(d / "inputs.safetensors"))
    kwargs = {k: inputs[k].long() for k in ("input_ids", "attention_mask", "token_type_ids") if k in inputs}
    if "input_ids" not in kwargs:
        errors.append("inputs.safetensors has no input_ids")
        return
    expected = load_file(str(d / "ours.safetensors"))["expected_logits"].float()
    with torch.no_grad():
        logits = model(**kwargs).logits.float()
    report["logits_shape"] = list(logits.shape)
    if logits.shape != expected.shape:
        errors.append(f"logits shape {list(logits.shape)} != expected_logits {list(expected.shape)}")
    else:
        diff = (logits - expected).abs().max().item()
        report["max_abs_diff"] = diff
        if not diff <= tol:  # also catches NaN
            errors.append(f"max |logits - expected_logits| = {diff:.3g} > {tol:g}")

    try:
        report["tokenizer"] = check_tokenizer(d, tokenizer_class, model.config.vocab_size)
        if not report["tokenizer"]["ok"]:
            errors.append(
                f"tokenizer max id {report['tokenizer']['max_id']} >= vocab_size "
                f"{model.config.vocab_size}"
            )
    except Exception as e:  # noqa: BLE001 - any failure to load is the finding
        report["tokenizer"] = dict(cls=tokenizer_class, ok=False, error=repr(e))
        errors.append(f"{tokenizer_class} failed to load: {e!r}")

    report["ok"] = not errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--json", required=True, type=Path, help="where to write the report")
    parser.add_argument("--tol", type=float, default=1e-4, help="max |logits diff| (default 1e-4)")
    parser.add_argument(
        "--strict", action="store_true", help="allow no missing key at all (not even rebuilt ones)"
    )
    args = parser.parse_args()
    torch.manual_seed(0)  # anything transformers initialises afresh is the same on every run

    reports = []
    for d in args.dirs:
        r = dict(dir=str(d), ok=False, errors=[])
        try:
            check_dir(d, args.tol, args.strict, r)
        except Exception as e:  # noqa: BLE001 - report it and go on with the next directory
            r["ok"] = False
            r["errors"].append(f"{type(e).__name__}: {e}")
            r["traceback"] = traceback.format_exc()
        reports.append(r)
        diff = r.get("max_abs_diff")
        diff = f"{diff:.3g}" if diff is not None else "-"
        status = "ok" if r["ok"] else "FAIL: " + "; ".join(r["errors"])
        print(f"{d}: {r.get('architecture')}, missing {r.get('missing')}, max |diff| {diff}: {status}")

    out = dict(
        ok=all(r["ok"] for r in reports),
        transformers=transformers.__version__,
        torch=torch.__version__,
        tol=args.tol,
        strict=args.strict,
        dirs=reports,
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
