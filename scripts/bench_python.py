#!/usr/bin/env python3
"""The Python package against its peers, in one process (BENCHMARKS.md, "Python"):

1. `RotaryEmbedding.rotate_queries_or_keys` on [8, 8, 1024, 64] float32 against
   rotary-embedding-torch 0.9.1 on torch CPU tensors (ours on the same tensors, and on numpy);
2. `Model.forward` against transformers' `RoFormerForMaskedLM` on the built-in poetry model,
   [4, 128] tokens;
3. the call overhead of `Model.embed` for one short text.

Run with the package installed (scripts/python_tests.sh leaves it in target/python-venv) and
torch, transformers and rotary-embedding-torch importable, e.g. from the peers virtualenv:

    PYTHONPATH=target/python-venv/lib/python3.11/site-packages \\
        ~/.cache/roformer-peers/venv/bin/python scripts/bench_python.py

Each figure is the median of repeated calls after a warm-up; both sides use every core.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from rotary_embedding_torch import RotaryEmbedding as TorchRotary
from transformers import RoFormerForMaskedLM

import roformer_rs

ROOT = Path(__file__).resolve().parent.parent
POETRY = ROOT / "crates" / "roformer-builtin" / "assets" / "poetry-model"


def median_seconds(f, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        f()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def bench_rotary() -> None:
    x = torch.randn(8, 8, 1024, 64)
    theirs = TorchRotary(dim=64)
    ours = roformer_rs.RotaryEmbedding(64)
    with torch.no_grad():
        t_theirs = median_seconds(lambda: theirs.rotate_queries_or_keys(x), 11)
    t_ours_torch = median_seconds(lambda: ours.rotate_queries_or_keys(x), 11)
    xn = x.numpy()
    t_ours_numpy = median_seconds(lambda: ours.rotate_queries_or_keys(xn), 11)
    inplace = xn.copy()
    t_ours_inplace = median_seconds(lambda: ours.rotate_queries_or_keys_(inplace), 11)
    mb = x.numel() * 4 / 1e6
    print(f"rotate_queries_or_keys [8, 8, 1024, 64] f32 ({mb:.0f} MB):")
    print(f"  rotary-embedding-torch      {t_theirs * 1e3:8.2f} ms")
    print(f"  roformer_rs, torch tensor   {t_ours_torch * 1e3:8.2f} ms  ({t_theirs / t_ours_torch:.1f}x)")
    print(f"  roformer_rs, numpy          {t_ours_numpy * 1e3:8.2f} ms  ({t_theirs / t_ours_numpy:.1f}x)")
    print(f"  roformer_rs, numpy in place {t_ours_inplace * 1e3:8.2f} ms  ({t_theirs / t_ours_inplace:.1f}x)")


def bench_forward() -> None:
    ours = roformer_rs.Model.from_pretrained(POETRY)
    theirs = RoFormerForMaskedLM.from_pretrained(POETRY, torch_dtype=torch.float32).eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 5000, size=(4, 128))
    ids_t = torch.from_numpy(ids)
    with torch.no_grad():
        want = theirs(input_ids=ids_t).logits.numpy()
        t_theirs = median_seconds(lambda: theirs(input_ids=ids_t), 7)
    got = ours.forward(ids)["logits"]
    t_ours = median_seconds(lambda: ours.forward(ids), 7)
    print("Model.forward, built-in poetry model, [4, 128] tokens, with the MLM head:")
    print(f"  transformers RoFormerForMaskedLM {t_theirs * 1e3:8.2f} ms")
    print(f"  roformer_rs Model.forward        {t_ours * 1e3:8.2f} ms  ({t_theirs / t_ours:.1f}x)")
    print(f"  max |logits difference| {np.abs(got - want).max():.2e}")


def bench_overhead() -> None:
    model = roformer_rs.Model.builtin()
    t_embed = median_seconds(lambda: model.embed("明月"), 101, warmup=5)
    t_tokenize = median_seconds(lambda: model.tokenize("明月"), 1001, warmup=5)
    rope = roformer_rs.RotaryEmbedding(8)
    tiny = np.zeros((1, 8), np.float32)
    t_rope = median_seconds(lambda: rope.rotate_queries_or_keys(tiny), 1001, warmup=5)
    print("call overhead:")
    print(f"  Model.embed('明月') (4 tokens, the whole forward pass) {t_embed * 1e6:8.1f} us")
    print(f"  Model.tokenize('明月')                                {t_tokenize * 1e6:8.1f} us")
    print(f"  RotaryEmbedding on [1, 8] f32                          {t_rope * 1e6:8.1f} us")


def main() -> None:
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; torch {torch.__version__} with "
          f"{torch.get_num_threads()} threads; numpy {np.__version__}")
    bench_rotary()
    bench_forward()
    bench_overhead()


if __name__ == "__main__":
    main()
