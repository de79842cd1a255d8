#!/usr/bin/env python3
"""Parity fixtures for the vision model (crates/roformer/src/vision): small random DINOv3
checkpoints made with transformers 5.x (`DINOv3ViTModel`, model_type `dinov3_vit`) and the
outputs it gives on images of several sizes.

Run with the peers' virtualenv (torch, transformers 5.x, safetensors; see
../shared/peers/setup.sh):

    HF_HUB_OFFLINE=1 ~/.cache/roformer-peers/venv/bin/python scripts/make_dinov3_fixtures.py

Writes crates/roformer/tests/fixtures/vision/<case>/ with
  config.json, model.safetensors   as `save_pretrained` writes them;
  reference.safetensors            for each input i: pixel_values_i [b, c, h, w] and the
                                   outputs last_hidden_state_i, pooler_output_i (float32,
                                   eval mode, eager attention).
The inputs cover the config's own size, non-square images, grids other than the config's,
pixels past the last whole patch (dropped by the convolution) and an image of a single patch.

Also crates/roformer/tests/fixtures/vision/resample.safetensors: a random table over a 3x4
grid (`table`, [1, 12, 5]) and timm's `resample_abs_pos_embed` of it (bicubic, antialiased)
to other grids (`out_RxC`), for the `absolute` position kind.

Weights are random with larger spreads than transformers' initialisation (N(0, 0.2^2)
matrices, N(1, 0.2^2) norm weights, N(0, 0.1^2) biases, N(0.5, 0.2^2) layer scales, N(0, 1)
CLS and register tokens) so that every part matters: a loading, layout or rotation mistake
moves the outputs far past the test tolerance.
"""

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import DINOv3ViTConfig, DINOv3ViTModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "roformer" / "tests" / "fixtures" / "vision"

# Tiny shapes: each case stays a few tens of KB.
TINY = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    patch_size=4,
    image_size=16,
    num_channels=3,
)

CASES = {
    # DINOv3's defaults: q, v and output biases, no key bias, GELU MLP, no registers.
    "base": dict(),
    # Registers, a gated (SwiGLU) MLP, every bias on, another theta, wider heads.
    "registers_gated": dict(
        num_register_tokens=4,
        use_gated_mlp=True,
        hidden_act="silu",
        key_bias=True,
        rope_theta=1000.0,
        num_attention_heads=2,
    ),
    # No bias anywhere, one register, a config grid that is not square.
    "no_bias": dict(
        num_register_tokens=1,
        query_bias=False,
        key_bias=False,
        value_bias=False,
        proj_bias=False,
        mlp_bias=False,
        image_size=[12, 20],
    ),
    # Two channels, patches of 3 (odd), eight heads of 4 dims (one frequency per axis).
    "small_heads": dict(
        num_channels=2,
        patch_size=3,
        num_attention_heads=8,
        image_size=12,
        num_register_tokens=2,
    ),
}

# (batch, height, width) of each input: the config's size, non-square, other grids, leftover
# pixels on both axes, one single patch.
SIZES = [(2, 16, 16), (1, 18, 23), (2, 8, 28), (1, 5, 6)]


def randomize(model, seed):
    """Overwrites every parameter with seeded random values (see the module docstring)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() == 0 or name.endswith("mask_token"):
                continue
            if name.endswith("cls_token") or name.endswith("register_tokens"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif "lambda1" in name:
                p.copy_(0.5 + 0.2 * torch.randn(p.shape, generator=g))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def make_case(name, overrides, seed):
    cfg = DINOv3ViTConfig(**{**TINY, **overrides})
    cfg._attn_implementation = "eager"
    model = DINOv3ViTModel(cfg).eval()
    randomize(model, seed)
    out = OUT / name
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    g = torch.Generator().manual_seed(seed + 1000)
    reference = {}
    for i, (b, h, w) in enumerate(SIZES):
        pixels = torch.randn((b, cfg.num_channels, h, w), generator=g)
        with torch.no_grad():
            o = model(pixel_values=pixels)
        reference[f"pixel_values_{i}"] = pixels.contiguous()
        reference[f"last_hidden_state_{i}"] = o.last_hidden_state.clone()
        reference[f"pooler_output_{i}"] = o.pooler_output.clone()
    save_file(reference, out / "reference.safetensors")
    keys = sorted(json.loads((out / "config.json").read_text()).keys())
    print(f"{name}: {len(keys)} config fields, outputs for {SIZES}")


def make_resample():
    """timm's resample_abs_pos_embed (no prefix tokens): bicubic, antialiased."""
    g = torch.Generator().manual_seed(7)
    old = (3, 4)
    table = torch.randn((1, old[0] * old[1], 5), generator=g)
    tensors = {"table": table}
    for new in [(5, 7), (2, 3), (3, 4), (6, 2), (1, 9), (12, 16)]:
        grid = table.reshape(1, old[0], old[1], -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=new, mode="bicubic", antialias=True)
        tensors[f"out_{new[0]}x{new[1]}"] = grid.permute(0, 2, 3, 1).reshape(1, -1, 5).contiguous()
    save_file(tensors, OUT / "resample.safetensors")
    print(f"resample: {sorted(tensors)}")


def main():
    torch.manual_seed(0)
    for seed, (name, overrides) in enumerate(CASES.items()):
        make_case(name, overrides, 100 + seed)
    make_resample()


if __name__ == "__main__":
    main()
