#!/usr/bin/env python3
"""Parity fixtures for the Python package's rotary core (python/tests/test_parity.py): inputs
and the outputs rotary-embedding-torch 0.9.1 and transformers' `apply_rotary_pos_emb` give on
them, so that the tests check parity without torch.

Run in the peers virtualenv (torch, transformers; `pip install rotary-embedding-torch==0.9.1`):

    ~/.cache/roformer-peers/venv/bin/python scripts/make_rotary_torch_fixtures.py

Writes python/tests/fixtures/rotary_torch.npz: for each case `<case>.<name>` arrays (inputs
and outputs, float32 unless the case is float16) and `<case>.args`, a JSON string of the
arguments.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
import rotary_embedding_torch
import torch
from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

assert version("rotary-embedding-torch") == "0.9.1", version("rotary-embedding-torch")


OUT = Path(__file__).resolve().parent.parent / "python" / "tests" / "fixtures" / "rotary_torch.npz"
torch.manual_seed(0)
arrays: dict[str, np.ndarray] = {}


def put(case: str, args: dict, **tensors: torch.Tensor) -> None:
    arrays[f"{case}.args"] = np.array(json.dumps(args))
    for name, t in tensors.items():
        arrays[f"{case}.{name}"] = t.detach().numpy()


def rotate_cases() -> None:
    cases = [
        ("partial_offset", dict(dim=32), (2, 3, 17, 48), dict(offset=4)),
        ("token_major", dict(dim=32, seq_before_head_dim=True), (2, 9, 3, 32), dict()),
        (
            "interpolated_rescaled",
            dict(dim=16, theta=500, interpolate_factor=2.0, theta_rescale_factor=1.5),
            (1, 2, 10, 16),
            dict(),
        ),
        ("long", dict(dim=32), (1, 1, 300, 32), dict(offset=1000)),
    ]
    for name, kwargs, shape, call in cases:
        rope = RotaryEmbedding(**kwargs)
        x = torch.randn(shape)
        put(name, {"init": kwargs, "call": call}, x=x, out=rope.rotate_queries_or_keys(x, **call))
    rope = RotaryEmbedding(dim=32)
    x = torch.randn(1, 2, 6, 32).half()
    put("float16", {"init": {"dim": 32}, "call": {}}, x=x, out=rope.rotate_queries_or_keys(x))


def cached_keys_case() -> None:
    rope = RotaryEmbedding(dim=16)
    q, k = torch.randn(1, 2, 3, 16), torch.randn(1, 2, 8, 16)
    rq, rk = rope.rotate_queries_with_cached_keys(q, k, offset=2)
    put("cached_keys", {"init": {"dim": 16}, "call": {"offset": 2}}, q=q, k=k, rq=rq, rk=rk)


def axial_cases() -> None:
    for name, kwargs, shape in [
        ("axial_pixel", dict(dim=8, freqs_for="pixel", max_freq=10), (2, 4, 5, 32)),
        ("axial_lang", dict(dim=8), (1, 3, 4, 16)),
    ]:
        rope = RotaryEmbedding(**kwargs)
        x = torch.randn(shape)
        freqs = rope.get_axial_freqs(shape[-3], shape[-2])
        put(name, {"init": kwargs, "call": {"axes": 2}}, x=x, out=apply_rotary_emb(freqs, x))


def transformers_case() -> None:
    q, k = torch.randn(2, 4, 6, 16), torch.randn(2, 2, 6, 16)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8]]).float()
    freqs = positions[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    rq, rk = apply_rotary_pos_emb(q, k, cos, sin)
    put("transformers", {}, q=q, k=k, cos=cos, sin=sin, rq=rq, rk=rk)


def main() -> None:
    rotate_cases()
    cached_keys_case()
    axial_cases()
    transformers_case()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(arrays)} arrays)")


if __name__ == "__main__":
    main()
