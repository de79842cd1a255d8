#!/usr/bin/env python3
"""Golden fixtures for the rotary crate's N-D positions (crates/rotary/src/nd/).

Run with the peers virtualenv (transformers 5.23, torch, rotary-embedding-torch):

    ~/.cache/roformer-peers/venv/bin/python scripts/make_nd_fixtures.py

Writes crates/rotary/tests/fixtures/nd/cases.json with:
  axial_lang, axial_pixel  rotary-embedding-torch's `get_axial_freqs(h, w)` for
                           `freqs_for='lang'` (integer positions) and `'pixel'` (positions
                           linspace(-1, 1) per axis): the angle of every pair of every grid cell
                           (its freqs are repeated per interleaved pair; we keep one per pair).
  mrope                    transformers' Qwen2VLRotaryEmbedding (text model, M-RoPE with
                           `mrope_section`) on 3D position ids: the cos and sin it returns
                           (half layout, attention factor 1).
  vision_2d                transformers' Qwen2VLVisionRotaryEmbedding (axial 2D over (row, col))
                           on a grid: cos and sin (half layout over the whole head).
All values are float32 results written as decimals.
"""

import json
from pathlib import Path

import torch
from rotary_embedding_torch import RotaryEmbedding
from transformers.models.qwen2_vl.configuration_qwen2_vl import (
    Qwen2VLTextConfig,
    Qwen2VLVisionConfig,
)
from transformers.models.qwen2_vl.modeling_qwen2_vl import (
    Qwen2VLRotaryEmbedding,
    Qwen2VLVisionRotaryEmbedding,
)

OUT = Path(__file__).resolve().parent.parent / "crates/rotary/tests/fixtures/nd"


def floats(t):
    return [float(x) for x in t.flatten().tolist()]


def axial(freqs_for, dim, h, w, **kwargs):
    rope = RotaryEmbedding(dim=dim, freqs_for=freqs_for, cache_if_possible=False, **kwargs)
    freqs = rope.get_axial_freqs(h, w)  # (h, w, 2 * dim): per axis dim values, pairs repeated
    assert freqs.shape == (h, w, 2 * dim)
    angles = freqs[..., ::2]  # one angle per interleaved pair
    return {"dims_per_axis": [dim, dim], "grid": [h, w], "angles": floats(angles), **kwargs}


def mrope():
    section = [2, 3, 3]
    config = Qwen2VLTextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
    )
    rope = Qwen2VLRotaryEmbedding(config)
    head_dim = 64 // 4
    # 3 text tokens, a 1 x 2 x 3 image, 2 more text tokens (positions as Qwen2-VL lays them out).
    t = [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7]
    h = [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7]
    w = [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7]
    pos = torch.tensor([t, h, w])[:, None, :]  # (3, batch=1, seq)
    x = torch.zeros(1, len(t), head_dim)
    cos, sin = rope(x, pos)
    assert cos.shape == (1, len(t), head_dim)
    return {"head_dim": head_dim, "base": 10000.0, "mrope_section": section,
            "positions": [list(p) for p in zip(t, h, w)], "cos": floats(cos), "sin": floats(sin)}


def vision_2d():
    head_dim, rows, cols = 16, 3, 4
    config = Qwen2VLVisionConfig(embed_dim=head_dim * 2, num_heads=2,
                                 rope_parameters={"rope_type": "axial", "rope_theta": 10000.0})
    rope = Qwen2VLVisionRotaryEmbedding(config)
    pos = torch.tensor([[r, c] for r in range(rows) for c in range(cols)])  # (N, 2)
    cos, sin = rope(torch.zeros(1), pos)
    assert cos.shape == (rows * cols, head_dim), cos.shape
    return {"head_dim": head_dim, "base": 10000.0, "grid": [rows, cols],
            "cos": floats(cos), "sin": floats(sin)}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    cases = {
        "axial_lang": axial("lang", 8, 3, 5, theta=100),
        "axial_pixel": axial("pixel", 8, 4, 3, max_freq=10),
        "mrope": mrope(),
        "vision_2d": vision_2d(),
    }
    (OUT / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
