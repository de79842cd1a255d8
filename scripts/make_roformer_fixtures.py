#!/usr/bin/env python3
"""Parity fixtures for the RoFormer model (crates/roformer): small random checkpoints and the
outputs the reference implementations give on them.

Two references, each in its own virtualenv:

* transformers 5.x (`RoFormerModel`, `RoFormerForMaskedLM`, ...) for RoFormer: the peers
  virtualenv, ~/.cache/roformer-peers/venv (see ../shared/peers/setup.sh).
* JunnYu's `roformer` package (PyPI `roformer` 0.4.3) for RoFormer-V2 (`norm_type: rms_norm`,
  `use_bias: false`), which needs transformers 4.x. Its virtualenv reuses the peers' torch:

      python3 -m venv ~/.cache/roformer-v2-venv
      ~/.cache/roformer-v2-venv/bin/pip install --no-deps roformer==0.4.3 \\
          transformers==4.46.3 tokenizers==0.20.3 "huggingface_hub<1.0" requests
      # Fall back to the peers' site-packages (torch, numpy, safetensors, ...) AFTER the venv's
      # own, so that its transformers 4.x wins over the peers' 5.x:
      echo ~/.cache/roformer-peers/venv/lib/python3.11/site-packages \\
          > ~/.cache/roformer-v2-venv/lib/python3.11/site-packages/zz_peers.pth
      (requests' own small deps come from the peers' site-packages too; where those lack
      them, add them to this venv: pip install --no-deps urllib3 charset_normalizer certifi.)

  (roformer 0.4.3 imports `SequenceSummary`, which transformers removed after 4.4x.)

Run (the script re-runs itself under the V2 virtualenv for the V2 part):

    HF_HUB_OFFLINE=1 ~/.cache/roformer-peers/venv/bin/python scripts/make_roformer_fixtures.py

Writes crates/roformer/tests/fixtures/model/<case>/ with config.json, the checkpoint
(model.safetensors or pytorch_model.bin) and reference.safetensors holding the inputs
(input_ids, and attention_mask / token_type_ids when used; int64) and the reference outputs
(last_hidden_state, and logits for head models; float32, computed in float32 in eval mode).
Also activations.safetensors: transformers' ACT2FN[name] on a grid `x`, one tensor per name.

Weights are random with larger spreads than transformers' initialisation (N(0, 0.2^2) matrices,
N(1, 0.2^2) norm weights, N(0, 0.1^2) biases, N(0, 1) embeddings) so that attention patterns,
norms and biases all matter: a loading or layout mistake moves the outputs far past the test
tolerance.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "roformer" / "tests" / "fixtures" / "model"
V2_PYTHON = Path.home() / ".cache" / "roformer-v2-venv" / "bin" / "python"

# Tiny shapes: fixtures stay a few tens of KB each.
TINY = dict(
    vocab_size=97,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    type_vocab_size=2,
    pad_token_id=0,
)


def randomize(model, seed):
    """Overwrites every parameter with seeded random values (see the module docstring)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue
            if "embeddings" in name and p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    model.eval()
    return model


def make_inputs(seed, batch, seq, lengths, vocab, token_types):
    """Random ids in 1..vocab, right padding (id 0, mask 0) past each row's length, and token
    type 1 on the second half of each row's real tokens when `token_types`."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    mask = torch.zeros(batch, seq, dtype=torch.long)
    types = torch.zeros(batch, seq, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
        ids[b, n:] = 0
        if token_types:
            types[b, n // 2 : n] = 1
    inputs = {"input_ids": ids}
    if any(n < seq for n in lengths):
        inputs["attention_mask"] = mask
    if token_types:
        inputs["token_type_ids"] = types
    return inputs


def write_case(name, model, inputs, save, reference_model=None):
    """Saves `model` and the outputs of `reference_model or model` on `inputs`. `save`:
    'safetensors' (save_pretrained), 'pickle' (torch.save of the state dict, tied tensors
    included), or 'untied_safetensors' (the state dict without the tied MLM decoder weight
    and the position table, for JunnYu's package whose save_pretrained refuses shared tensors)."""
    case = OUT / name
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    if save == "safetensors":
        model.save_pretrained(case)
    else:
        model.config.save_pretrained(case)
    if save == "pickle":
        torch.save(model.state_dict(), case / "pytorch_model.bin")
    if save == "untied_safetensors":
        drop = ("cls.predictions.decoder.weight", "roformer.encoder.embed_positions.weight")
        state = {k: v.clone().contiguous() for k, v in model.state_dict().items() if k not in drop}
        save_file(state, case / "model.safetensors")
    ref = reference_model or model
    with torch.no_grad():
        out = ref(**inputs, output_hidden_states=True, return_dict=True)
    tensors = {k: v.contiguous() for k, v in inputs.items()}
    if hasattr(out, "last_hidden_state") and out.last_hidden_state is not None:
        tensors["last_hidden_state"] = out.last_hidden_state
    else:
        tensors["last_hidden_state"] = out.hidden_states[-1]
        tensors["logits"] = out.logits
    save_file({k: v.contiguous() for k, v in tensors.items()}, case / "reference.safetensors")
    print(f"{name}: {sorted(p.name for p in case.iterdir())}")


def v1_cases():
    import transformers
    from transformers import (
        RoFormerConfig,
        RoFormerForMaskedLM,
        RoFormerForSequenceClassification,
        RoFormerForTokenClassification,
        RoFormerModel,
    )
    from transformers.activations import ACT2FN

    assert transformers.__version__.startswith("5."), transformers.__version__
    torch.manual_seed(0)
    padded = dict(batch=3, seq=10, lengths=[10, 7, 4], vocab=TINY["vocab_size"])

    # Masked LM, gelu, padding and token types; transformers 5 leaves the tied decoder out.
    cfg = RoFormerConfig(**TINY, hidden_act="gelu")
    write_case(
        "mlm_gelu",
        randomize(RoFormerForMaskedLM(cfg), 1),
        make_inputs(11, token_types=True, **padded),
        "safetensors",
    )

    # Bare RoFormerModel (no `roformer.` prefix), factorised embeddings, rotary values, gelu_new.
    cfg = RoFormerConfig(**TINY, embedding_size=16, rotary_value=True, hidden_act="gelu_new")
    write_case(
        "base_factorised_rotary_value",
        randomize(RoFormerModel(cfg), 2),
        make_inputs(12, token_types=True, **padded),
        "safetensors",
    )

    # Masked LM as a pickle (torch.save of the state dict: decoder weight and bias stored),
    # relu, factorised embeddings (the MLM transform maps back to embedding_size).
    cfg = RoFormerConfig(**TINY, embedding_size=24, hidden_act="relu")
    write_case(
        "mlm_pickle_relu",
        randomize(RoFormerForMaskedLM(cfg), 3),
        make_inputs(13, token_types=False, **padded),
        "pickle",
    )

    # Longer than max_position_embeddings: the checkpoint says 16; the reference is the same
    # weights in a config with 64 positions (the sinusoidal table does not depend on it).
    short = dict(TINY, max_position_embeddings=16)
    model = randomize(RoFormerModel(RoFormerConfig(**short, hidden_act="silu")), 4)
    reference = RoFormerModel(RoFormerConfig(**TINY, hidden_act="silu")).eval()
    state = {k: v for k, v in model.state_dict().items() if "embed_positions" not in k}
    missing, unexpected = reference.load_state_dict(state, strict=False)
    assert missing == ["encoder.embed_positions.weight"] and not unexpected, (missing, unexpected)
    write_case(
        "base_long_silu",
        model,
        make_inputs(14, batch=2, seq=40, lengths=[40, 33], vocab=TINY["vocab_size"], token_types=False),
        "safetensors",
        reference_model=reference,
    )

    # Sequence classification (RoFormerClassificationHead), gelu_pytorch_tanh, 3 labels.
    cfg = RoFormerConfig(**TINY, hidden_act="gelu_pytorch_tanh", num_labels=3)
    write_case(
        "seq_cls",
        randomize(RoFormerForSequenceClassification(cfg), 5),
        make_inputs(15, token_types=True, **padded),
        "safetensors",
    )

    # Token classification, gelu_fast, 5 labels.
    cfg = RoFormerConfig(**TINY, hidden_act="gelu_fast", num_labels=5)
    write_case(
        "token_cls",
        randomize(RoFormerForTokenClassification(cfg), 6),
        make_inputs(16, token_types=False, **padded),
        "safetensors",
    )

    # Decoder (causal self-attention) with padding.
    cfg = RoFormerConfig(**TINY, is_decoder=True, hidden_act="gelu")
    write_case(
        "decoder",
        randomize(RoFormerModel(cfg), 7),
        make_inputs(17, token_types=False, **padded),
        "safetensors",
    )

    # Every activation on a grid.
    names = [
        "gelu", "gelu_python", "gelu_10", "gelu_new", "gelu_pytorch_tanh", "gelu_python_tanh",
        "gelu_accurate", "gelu_fast", "quick_gelu", "relu", "relu2", "relu6", "leaky_relu",
        "silu", "swish", "mish", "hardswish", "sigmoid", "tanh", "linear", "laplace",
    ]
    x = torch.cat([torch.linspace(-30, 30, 121), torch.linspace(-4, 4, 161)]).float()
    acts = {"x": x}
    with torch.no_grad():
        for n in names:
            acts[n] = ACT2FN[n](x).float().clone().contiguous()
    save_file(acts, OUT / "activations.safetensors")
    print(f"activations: {len(names)}")


def v2_cases():
    import transformers
    from roformer import RoFormerConfig, RoFormerForMaskedLM, RoFormerModel

    assert transformers.__version__.startswith("4."), transformers.__version__
    padded = dict(batch=3, seq=10, lengths=[10, 7, 4], vocab=TINY["vocab_size"])
    v2 = dict(TINY, norm_type="rms_norm", use_bias=False)

    # V2 masked LM: no biases in the encoder, weightless RMS norms, decoder tied to the words.
    cfg = RoFormerConfig(**v2, hidden_act="relu")
    write_case(
        "v2_mlm",
        randomize(RoFormerForMaskedLM(cfg), 21),
        make_inputs(31, token_types=True, **padded),
        "untied_safetensors",
    )

    # V2 bare model as a pickle, factorised embeddings (the projection keeps its bias),
    # rotary values, gelu.
    cfg = RoFormerConfig(**v2, embedding_size=16, rotary_value=True, hidden_act="gelu")
    write_case(
        "v2_base_pickle",
        randomize(RoFormerModel(cfg), 22),
        make_inputs(32, token_types=False, **padded),
        "pickle",
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["all", "v1", "v2"], default="all")
    part = parser.parse_args().part
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
