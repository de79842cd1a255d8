"""Shared fixtures: the repository's paths, the built-in models (loaded once), numpy references."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import roformer_rs

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "crates" / "roformer-builtin" / "assets"
MODEL_FIXTURES = REPO / "crates" / "roformer" / "tests" / "fixtures" / "model"
IMAGE_FIXTURES = REPO / "crates" / "roformer" / "tests" / "fixtures" / "images"
VISION_FIXTURES = REPO / "crates" / "roformer" / "tests" / "fixtures" / "vision"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "U32": np.uint32, "U8": np.uint8}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (an 8-byte header size, a JSON header, the data)."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        out[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(info["shape"])
    return out


def broken_copy(source: Path, target: Path, file: str, content: bytes) -> Path:
    """A copy of the model directory ``source`` at ``target`` with ``file`` replaced by
    ``content``."""
    shutil.copytree(source, target)
    (target / file).write_bytes(content)
    return target


@pytest.fixture(scope="session")
def poetry() -> roformer_rs.Model:
    return roformer_rs.Model.builtin()


@pytest.fixture(scope="session")
def fashion() -> roformer_rs.VisionModel:
    return roformer_rs.VisionModel.builtin()


def rotate_reference(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray, interleaved: bool) -> np.ndarray:
    """RoPE in float64 numpy: ``x`` ``[..., seq, d]``, the first ``2 * len(inv_freq)`` features
    rotate by ``positions[s] * inv_freq[i]``; pairs ``(2i, 2i+1)`` or ``(i, i + r/2)``."""
    x = x.astype(np.float64)
    r = 2 * len(inv_freq)
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [seq, r/2]
    cos, sin = np.cos(angles), np.sin(angles)
    out = x.copy()
    if interleaved:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
        out[..., 0:r:2] = a * cos - b * sin
        out[..., 1:r:2] = b * cos + a * sin
    else:
        h = r // 2
        a, b = x[..., :h], x[..., h:r]
        out[..., :h] = a * cos - b * sin
        out[..., h:r] = b * cos + a * sin
    return out


def lang_inv_freq(dim: int, theta: float = 10000.0) -> np.ndarray:
    """``theta^(-2i/dim)``, float64."""
    return theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
