#!/usr/bin/env python3
"""Gradient-parity fixtures for training (crates/roformer): the masked-LM / classification loss of
small random checkpoints, and the gradient of that loss with respect to every parameter, as the
reference implementations compute them with `loss.backward()`.

References and virtualenvs are the same as scripts/make_roformer_fixtures.py (its header has the
recipe for both):

* transformers 5.x (`RoFormerForMaskedLM`, `RoFormerForSequenceClassification`,
  `BertForMaskedLM`): the peers virtualenv, ~/.cache/roformer-peers/venv.
* JunnYu's `roformer` 0.4.3 (RoFormer-V2: `norm_type: rms_norm`, `use_bias: false`) on
  transformers 4.46.3: ~/.cache/roformer-v2-venv, which reuses the peers' torch. If `requests`
  fails to import there, the peers' site-packages lack its small deps; add them to that venv:
      ~/.cache/roformer-v2-venv/bin/pip install --no-deps urllib3 charset_normalizer certifi

Run (the script re-runs itself under the V2 virtualenv for the V2 case; no network needed):

    HF_HUB_OFFLINE=1 ~/.cache/roformer-peers/venv/bin/python scripts/make_training_fixtures.py

Writes crates/roformer/tests/fixtures/training/<case>/ for the cases mlm_rotary,
mlm_rotary_value, mlm_factorised, mlm_v2, seq_cls and bert_mlm, each with:

* config.json and model.safetensors: `save_pretrained` (transformers 5 leaves the tied MLM
  decoder weight and bias out). mlm_v2: JunnYu's save_pretrained refuses shared tensors, so the
  state dict is written with `save_file` (metadata {"format": "pt"}) without the tied decoder
  weight and the sinusoidal position table, as make_roformer_fixtures.py does for v2_mlm.
* inputs.safetensors (int64): input_ids [2, 9], attention_mask [2, 9] (row 1 padded: 0 on its
  last 3 positions, pad id 0 there), token_type_ids [2, 9] (1 on the second half of each row's
  real tokens), labels: [2, 9] for the MLM cases (-100 except at 4 + 3 masked positions, whose
  input id is MASK_ID and whose label is the original id), [2] for seq_cls.
* expected.safetensors (float32): `loss` (0-d: a scalar, shape []), `logits`, and
  `grad.<name>` for every parameter `model.named_parameters()` yields that requires a gradient,
  under that exact name. Tied parameters appear once (the first name; see manifest.json).
  RoFormer's `embed_positions.weight` table is a frozen parameter (requires_grad false): it has
  no grad tensor and is listed under "frozen".
* manifest.json: the reference (package versions), the loss in f32 and f64, every parameter
  (name, shape, requires_grad, grad key), the tied aliases (state-dict name -> the
  named_parameters name it shares storage with), the keys model.safetensors holds, and, per
  gradient tensor, the difference between the float32 gradients and the same computation in
  float64 (`model.double()` on the same f32 weights and inputs):
      max_abs_diff = max |g32 - g64|;  max_abs = max |g64|;  rel_diff = max_abs_diff / max_abs
  (a normwise relative error: elementwise ratios blow up on entries that are ~0), plus
  max_elementwise_rel = max |g32 - g64| / |g64| over the entries with |g64| >= 1e-3 * max_abs.
  Gradients that are zero in exact arithmetic (f64 max_abs <= 1e-12: BERT's attention key
  biases, since softmax ignores a constant added to a whole row of scores; RoFormer rotates
  the key bias by position, so its gradient is not zero) hold f32 rounding noise (~1e-7);
  they are listed under "grads_zero_in_exact_arithmetic" and left out of max_grad_rel_diff.

The loss is transformers' CrossEntropyLoss with its default mean reduction over the labels that
are not -100. Every dropout probability is 0.0, so the loss and gradients (computed in train
mode) equal what eval mode gives; the script checks that the train- and eval-mode logits agree.
Everything runs on the CPU with one thread and deterministic algorithms, so re-running gives
byte-identical files.

Weights are random with larger spreads than transformers' initialisation, the scheme of
make_roformer_fixtures.py (N(0, 0.2^2) matrices, N(1, 0.2^2) LayerNorm weights, N(0, 0.1^2)
biases, N(0, 1) embeddings, the word-embedding row of pad_token_id included), so that every
tensor, and every tensor's gradient, matters.

Note: the word embeddings have padding_idx = pad_token_id, so PyTorch gives no gradient to that
row through the embedding lookup (the tied MLM decoder still does). Pad ids here only sit at
masked-out positions, whose gradient is exactly zero anyway (their attention weights are exactly
0 and their labels are -100), so this does not show in these fixtures.

Note: a model built from its config has embed_positions.weight with requires_grad false, but
transformers 5.23's from_pretrained loads it back with requires_grad true. Its gradient stays
None all the same (the table's forward runs under torch.no_grad()), yet an optimiser over
model.parameters() would then hold it. Reloading a fixture with from_pretrained and running the
same backward reproduces expected.safetensors bit for bit.
"""

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "roformer" / "tests" / "fixtures" / "training"
V2_PYTHON = Path.home() / ".cache" / "roformer-v2-venv" / "bin" / "python"

# Tiny shapes, no dropout anywhere (train and eval agree).
TINY = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    type_vocab_size=2,
    pad_token_id=0,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)

BATCH, SEQ, LENGTHS = 2, 9, [9, 6]
CLS_ID, MASK_ID, FIRST_ID = 2, 4, 5  # 0 is pad; ids FIRST_ID.. are ordinary tokens
MASKED_PER_ROW = [4, 3]
SEQ_CLS_LABELS = [2, 0]
# A gradient tensor whose f64 values are all below this is zero up to rounding (see write_case).
EXACT_ZERO = 1e-12


def randomize(model, seed):
    """Overwrites every trainable parameter with seeded random values (see the docstring)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            if "embeddings" in name and p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model


def make_inputs(seed, vocab, task):
    """Batch 2, length 9, row 1 right-padded to 6 real tokens, CLS first, token type 1 on the
    second half of each row's real tokens. task 'mlm': MASKED_PER_ROW random non-CLS real
    positions get MASK_ID and a label (the original id), -100 elsewhere; 'seq_cls': labels [2]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(FIRST_ID, vocab, (BATCH, SEQ), generator=g)
    ids[:, 0] = CLS_ID
    mask = torch.zeros(BATCH, SEQ, dtype=torch.long)
    types = torch.zeros(BATCH, SEQ, dtype=torch.long)
    labels = torch.full((BATCH, SEQ), -100, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
        ids[b, n:] = 0
        types[b, n // 2 : n] = 1
        if task == "mlm":
            picked = 1 + torch.randperm(n - 1, generator=g)[: MASKED_PER_ROW[b]]
            labels[b, picked] = ids[b, picked]
            ids[b, picked] = MASK_ID
    if task == "seq_cls":
        labels = torch.tensor(SEQ_CLS_LABELS, dtype=torch.long)
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)


def tied_aliases(model):
    """{state-dict name: the named_parameters() name of the same Parameter} for the names that
    named_parameters() leaves out because they share a Parameter with an earlier name."""
    canonical = {id(p): n for n, p in model.named_parameters()}
    return {
        n: canonical[id(p)]
        for n, p in model.named_parameters(remove_duplicate=False)
        if canonical[id(p)] != n
    }


def loss_and_grads(model, inputs):
    """Train-mode forward with labels, backward; returns loss, logits and {name: grad}."""
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(**inputs, return_dict=True)
    out.loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    missing = [n for n, p in trainable if p.grad is None]
    assert not missing, f"no gradient for {missing}"
    grads = {n: p.grad.detach().clone() for n, p in trainable}
    model.eval()
    with torch.no_grad():
        eval_logits = model(**{k: v for k, v in inputs.items() if k != "labels"}).logits
    assert torch.equal(eval_logits, out.logits.detach()), "train and eval logits differ"
    return out.loss.detach(), out.logits.detach(), grads


def sig(x):
    """A float rounded to 4 significant digits (the manifest is for reading, not for math)."""
    return float(f"{float(x):.4g}")


def compare(a32, a64):
    d = (a32.double() - a64).abs()
    scale = a64.abs().max().item()
    big = a64.abs() >= 1e-3 * scale
    return dict(
        max_abs_diff=sig(d.max().item()),
        max_abs=sig(scale),
        rel_diff=sig(d.max().item() / scale) if scale > 0 else 0.0,
        max_elementwise_rel=sig((d[big] / a64.abs()[big]).max().item()) if scale > 0 else 0.0,
    )


def write_case(name, model, inputs, save, reference):
    """Saves `model` (`save`: 'safetensors' for save_pretrained, 'untied_safetensors' for the
    state dict without the tied decoder weight and the position table), its inputs, its loss,
    logits and gradients in f32, and the manifest with the f32-vs-f64 comparison."""
    case = OUT / name
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)

    if save == "safetensors":
        model.save_pretrained(case)
    else:
        model.config.architectures = [type(model).__name__]
        model.config.save_pretrained(case)
        drop = ("cls.predictions.decoder.weight", "roformer.encoder.embed_positions.weight")
        state = {k: v.clone().contiguous() for k, v in model.state_dict().items() if k not in drop}
        save_file(state, case / "model.safetensors", metadata={"format": "pt"})
    written = sorted(os.listdir(case))
    assert written == ["config.json", "model.safetensors"], written
    with safe_open(case / "model.safetensors", "pt") as f:
        stored_keys = sorted(f.keys())
        stored_meta = f.metadata()
    save_file({k: v.contiguous() for k, v in inputs.items()}, case / "inputs.safetensors")

    model64 = copy.deepcopy(model).double()
    assert tied_aliases(model64) == tied_aliases(model)
    loss, logits, grads = loss_and_grads(model, inputs)
    loss64, logits64, grads64 = loss_and_grads(model64, inputs)
    assert loss.dtype == torch.float32 and loss.dim() == 0

    expected = {"loss": loss, "logits": logits}
    expected.update({f"grad.{n}": g for n, g in grads.items()})
    save_file({k: v.contiguous() for k, v in expected.items()}, case / "expected.safetensors")

    params = [
        dict(
            name=n,
            shape=list(p.shape),
            requires_grad=p.requires_grad,
            grad=f"grad.{n}" if p.requires_grad else None,
        )
        for n, p in model.named_parameters()
    ]
    per_tensor = {n: compare(grads[n], grads64[n]) for n in grads}
    # Gradients that vanish in exact arithmetic (BERT's key biases: softmax ignores a constant
    # added to every score of a row): the f32 values are rounding noise, compare them absolutely.
    zero = sorted(n for n, v in per_tensor.items() if v["max_abs"] <= EXACT_ZERO)
    for n in zero:
        per_tensor[n]["zero_in_exact_arithmetic"] = True
    manifest = dict(
        case=name,
        model_class=type(model).__name__,
        reference=reference,
        torch=torch.__version__.split("+")[0],
        loss=dict(
            key="loss",
            shape=[],
            dtype="float32",
            reduction="mean of the cross entropy over the labels that are not -100",
            f32=float(loss),
            f64=float(loss64),
        ),
        logits=dict(shape=list(logits.shape), f32_vs_f64=compare(logits, logits64)),
        inputs={k: list(v.shape) for k, v in inputs.items()},
        parameters=params,
        frozen=[p["name"] for p in params if not p["requires_grad"]],
        tied=tied_aliases(model),
        state_dict_keys=stored_keys,
        state_dict_metadata=stored_meta,
        state_dict_keys_not_written=sorted(set(model.state_dict()) - set(stored_keys)),
        grad_f32_vs_f64=per_tensor,
        grads_zero_in_exact_arithmetic=zero,
        max_grad_rel_diff=max(v["rel_diff"] for n, v in per_tensor.items() if n not in zero),
        max_grad_abs_diff=max(v["max_abs_diff"] for v in per_tensor.values()),
    )
    with open(case / "manifest.json", "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(
        f"{name}: loss {float(loss):.6f} (f64 {float(loss64):.6f}), {len(grads)} grads, "
        f"max rel f32-vs-f64 {manifest['max_grad_rel_diff']:.3g}, tied {manifest['tied']}"
    )


def v1_cases():
    import transformers
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        RoFormerConfig,
        RoFormerForMaskedLM,
        RoFormerForSequenceClassification,
    )

    assert transformers.__version__.startswith("5."), transformers.__version__
    ref = f"transformers {transformers.__version__}"

    cfg = RoFormerConfig(**TINY, vocab_size=97, hidden_act="gelu", rotary_value=False)
    model = randomize(RoFormerForMaskedLM(cfg), 101)
    write_case("mlm_rotary", model, make_inputs(201, 97, "mlm"), "safetensors", ref)

    cfg = RoFormerConfig(**TINY, vocab_size=89, hidden_act="gelu", rotary_value=True)
    model = randomize(RoFormerForMaskedLM(cfg), 102)
    write_case("mlm_rotary_value", model, make_inputs(202, 89, "mlm"), "safetensors", ref)

    # Factorised embeddings: embeddings_project 16 -> 32, the MLM transform maps back to 16.
    cfg = RoFormerConfig(**TINY, vocab_size=80, embedding_size=16, hidden_act="gelu")
    model = randomize(RoFormerForMaskedLM(cfg), 103)
    write_case("mlm_factorised", model, make_inputs(203, 80, "mlm"), "safetensors", ref)

    # problem_type set up front: forward would otherwise write it into the config.
    cfg = RoFormerConfig(
        **TINY,
        vocab_size=64,
        hidden_act="gelu",
        num_labels=3,
        problem_type="single_label_classification",
    )
    model = randomize(RoFormerForSequenceClassification(cfg), 105)
    write_case("seq_cls", model, make_inputs(205, 64, "seq_cls"), "safetensors", ref)

    # BERT: absolute learned positions; eager attention (plain matmul + softmax).
    cfg = BertConfig(**TINY, vocab_size=100, hidden_act="gelu", classifier_dropout=0.0)
    model = randomize(BertForMaskedLM._from_config(cfg, attn_implementation="eager"), 106)
    write_case("bert_mlm", model, make_inputs(206, 100, "mlm"), "safetensors", ref)


def v2_cases():
    import roformer
    import transformers
    from roformer import RoFormerConfig, RoFormerForMaskedLM

    assert transformers.__version__.startswith("4."), transformers.__version__
    ref = f"roformer {getattr(roformer, '__version__', '0.4.3')} on transformers {transformers.__version__}"
    # No biases in the encoder, weightless RMS norms, the decoder tied to the word embeddings.
    cfg = RoFormerConfig(
        **TINY, vocab_size=97, hidden_act="relu", norm_type="rms_norm", use_bias=False
    )
    model = randomize(RoFormerForMaskedLM(cfg), 104)
    write_case("mlm_v2", model, make_inputs(204, 97, "mlm"), "untied_safetensors", ref)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["all", "v1", "v2"], default="all")
    part = parser.parse_args().part
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    OUT.mkdir(parents=True, exist_ok=True)
    if part in ("all", "v1"):
        v1_cases()
    if part == "v2":
        v2_cases()
    if part == "all":
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        subprocess.run([str(V2_PYTHON), __file__, "--part", "v2"], check=True, env=env)


if __name__ == "__main__":
    main()
