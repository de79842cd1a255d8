#!/usr/bin/env python3
"""Golden fixture for the AdamW optimiser and the linear warm-up schedule
(crates/roformer/src/optim/).

Run with the peers virtualenv (torch, transformers 5.23, safetensors):

    ~/.cache/roformer-peers/venv/bin/python scripts/make_optim_fixtures.py

Writes crates/roformer/tests/fixtures/optim/adamw.safetensors with, for two parameters named
like RoFormer tensors,
  roformer.encoder.layer.0.attention.self.query.weight  (6, 5)  weight decay 0.1
  roformer.embeddings.LayerNorm.weight                  (7,)    no weight decay
the tensors
  init.<name>       the initial values (float32)
  grad.<k>.<name>   the gradient of step k = 0..4 (float32; magnitudes 1e-3 to 10)
  after.<k>.<name>  the values after torch.optim.AdamW's step k (float32)
  lr                the learning rate each step k used (float64, shape (5,))
The optimiser is torch.optim.AdamW(lr=1e-2, betas=(0.9, 0.999), eps=1e-8) with one parameter
group per tensor (weight_decay 0.1 and 0.0), driven by transformers'
get_linear_schedule_with_warmup(num_warmup_steps=2, num_training_steps=6): the learning rates
are 0, 5e-3, 1e-2, 7.5e-3, 5e-3 (the first step only moves the moments).
"""

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import get_linear_schedule_with_warmup

OUT = Path(__file__).resolve().parent.parent / "crates/roformer/tests/fixtures/optim"

DECAYED = "roformer.encoder.layer.0.attention.self.query.weight"
NOT_DECAYED = "roformer.embeddings.LayerNorm.weight"
PEAK_LR, WARMUP, TOTAL, STEPS = 1e-2, 2, 6, 5


def main():
    gen = torch.Generator().manual_seed(20240601)
    params = {
        DECAYED: torch.randn(6, 5, generator=gen, dtype=torch.float32),
        NOT_DECAYED: 1.0 + 0.1 * torch.randn(7, generator=gen, dtype=torch.float32),
    }
    tensors = {f"init.{n}": p.clone() for n, p in params.items()}
    leaves = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    opt = torch.optim.AdamW(
        [
            {"params": [leaves[DECAYED]], "weight_decay": 0.1},
            {"params": [leaves[NOT_DECAYED]], "weight_decay": 0.0},
        ],
        lr=PEAK_LR,
        betas=(0.9, 0.999),
        eps=1e-8,
        foreach=False,
    )
    sched = get_linear_schedule_with_warmup(opt, WARMUP, TOTAL)
    scales = [1.0, 1e-3, 10.0, 0.1, 1.0]
    lrs = []
    for k in range(STEPS):
        lrs.append(opt.param_groups[0]["lr"])
        for n, leaf in leaves.items():
            g = scales[k] * torch.randn(leaf.shape, generator=gen, dtype=torch.float32)
            leaf.grad = g
            tensors[f"grad.{k}.{n}"] = g.clone()
        opt.step()
        sched.step()
        for n, leaf in leaves.items():
            tensors[f"after.{k}.{n}"] = leaf.detach().clone()
    tensors["lr"] = torch.tensor(lrs, dtype=torch.float64)
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT / "adamw.safetensors"))
    print("lrs", lrs)


if __name__ == "__main__":
    main()
