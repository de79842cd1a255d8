"""The rotary core: ``RotaryEmbedding`` after rotary-embedding-torch, ``apply_rotary_pos_emb``
after transformers, and ``RopeScaling``, the schedule a Hugging Face ``config.json`` declares.

Inputs are numpy arrays (float32, float16, ``ml_dtypes.bfloat16``) or torch CPU tensors of the
same types; every result has its input's type and dtype. Angles are computed in float64 and
rounded once; the rotation runs in float32 in the Rust kernels, without the GIL.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import numpy as np

from . import _roformer_rs as _native
from ._arrays import float32_table, to_native


class RotaryEmbedding:
    """Rotary position embedding over the first ``dim`` features of the last axis.

    Mirrors rotary-embedding-torch's ``RotaryEmbedding``: ``theta`` (the base),
    ``freqs_for`` (``"lang"``: ``theta^(-2i/dim)``; ``"pixel"``: ``pi`` to ``pi*max_freq/2``),
    ``interpolate_factor`` (positions divided by it), ``theta_rescale_factor`` (NTK-aware:
    ``theta *= factor^(dim/(dim-2))``) and ``seq_before_head_dim`` (default ``seq_dim`` -3
    instead of -2). ``interleaved=True`` pairs features ``(2i, 2i+1)`` as rotary-embedding-torch
    does; ``False`` pairs ``(i, i + dim/2)`` (GPT-NeoX, LLaMA). A last axis longer than ``dim``
    is partial rotary: the remaining features pass through.
    """

    def __init__(
        self,
        dim: int,
        theta: float = 10000.0,
        interleaved: bool = True,
        freqs_for: Literal["lang", "pixel"] = "lang",
        max_freq: float = 10.0,
        interpolate_factor: float = 1.0,
        theta_rescale_factor: float = 1.0,
        seq_before_head_dim: bool = False,
    ) -> None:
        self.dim = dim
        self.freqs_for = freqs_for
        self.default_seq_dim = -3 if seq_before_head_dim else -2
        self._core = _native.RotaryCore(
            dim,
            theta=theta,
            interleaved=interleaved,
            freqs_for=freqs_for,
            max_freq=max_freq,
            interpolate_factor=interpolate_factor,
            theta_rescale_factor=theta_rescale_factor,
        )

    @property
    def inv_freq(self) -> np.ndarray:
        """The ``dim / 2`` inverse frequencies, float64."""
        return np.asarray(self._core.inv_freq(), dtype=np.float64)

    def rotate_queries_or_keys(self, x: Any, seq_dim: int | None = None, offset: int = 0) -> Any:
        """``x`` rotated by the positions ``offset, offset + 1, ...`` along ``seq_dim``."""
        seq_dim = self.default_seq_dim if seq_dim is None else seq_dim
        array, back = to_native(x)
        return back(self._core.rotate(array, seq_dim, offset))

    def rotate_queries_or_keys_(self, x: Any, seq_dim: int | None = None, offset: int = 0) -> Any:
        """``rotate_queries_or_keys`` in place (``x`` must be writable and C-contiguous);
        returns ``x``."""
        seq_dim = self.default_seq_dim if seq_dim is None else seq_dim
        array, _ = to_native(x, writable=True)
        self._core.rotate_(array, seq_dim, offset)
        return x

    def rotate_queries_with_cached_keys(
        self, q: Any, k: Any, seq_dim: int | None = None, offset: int = 0
    ) -> tuple[Any, Any]:
        """``(q, k)`` rotated for decoding with a cache: ``k`` from position 0, ``q`` (the last
        ``q_len`` of the ``k_len`` tokens) from ``k_len - q_len + offset``."""
        seq_dim = self.default_seq_dim if seq_dim is None else seq_dim
        q_len, k_len = q.shape[seq_dim], k.shape[seq_dim]
        if q_len > k_len:
            raise ValueError(f"q has {q_len} tokens, more than k's {k_len}")
        rotated_q = self.rotate_queries_or_keys(q, seq_dim, offset=k_len - q_len + offset)
        return rotated_q, self.rotate_queries_or_keys(k, seq_dim)

    def rotate_axial(self, x: Any, axes: int = 2, offsets: tuple[float, ...] | None = None) -> Any:
        """``x`` of shape ``[..., n_1, ..., n_axes, d]`` rotated by its grid positions: axis
        ``j`` rotates its own ``dim`` features (``axes * dim <= d``), as
        ``apply_rotary_emb(get_axial_freqs(n_1, ..., n_axes), x)`` in rotary-embedding-torch
        (``"pixel"`` frequencies put the cells at ``linspace(-1, 1, n)``)."""
        array, back = to_native(x)
        offs = None if offsets is None else [float(o) for o in offsets]
        return back(self._core.rotate_axial(array, axes, offs))

    def rotate_axial_(self, x: Any, axes: int = 2, offsets: tuple[float, ...] | None = None) -> Any:
        """``rotate_axial`` in place; returns ``x``."""
        array, _ = to_native(x, writable=True)
        offs = None if offsets is None else [float(o) for o in offsets]
        self._core.rotate_axial_(array, axes, offs)
        return x


def apply_rotary_pos_emb(
    q: Any, k: Any, cos: Any, sin: Any, unsqueeze_dim: int = 1
) -> tuple[Any, Any]:
    """``(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin)``, as transformers'
    ``apply_rotary_pos_emb``: ``cos`` and ``sin`` are ``[batch or 1, seq, r]`` (half layout),
    ``q`` and ``k`` are ``[batch, heads, seq, d]`` (``unsqueeze_dim=1``) or
    ``[batch, seq, heads, d]`` (``unsqueeze_dim=2``); ``r <= d`` features rotate."""
    q_array, q_back = to_native(q, "q")
    k_array, k_back = to_native(k, "k")
    cos_t, sin_t = float32_table(cos, "cos"), float32_table(sin, "sin")
    rq, rk = _native.apply_rotary_pos_emb(q_array, k_array, cos_t, sin_t, unsqueeze_dim)
    return q_back(rq), k_back(rk)


def apply_rotary_pos_emb_(
    q: Any, k: Any, cos: Any, sin: Any, unsqueeze_dim: int = 1
) -> tuple[Any, Any]:
    """``apply_rotary_pos_emb`` in place on writable, C-contiguous ``q`` and ``k``; returns
    them."""
    q_array, _ = to_native(q, "q", writable=True)
    k_array, _ = to_native(k, "k", writable=True)
    cos_t, sin_t = float32_table(cos, "cos"), float32_table(sin, "sin")
    _native.apply_rotary_pos_emb_(q_array, k_array, cos_t, sin_t, unsqueeze_dim)
    return q, k


class RopeScaling:
    """The rotary schedule of a Hugging Face ``config.json`` (``rope_theta``, ``rope_scaling``
    or ``rope_parameters``: default, linear, dynamic, yarn, llama3, longrope), computed in
    float64 as transformers' ``modeling_rope_utils`` defines it."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def from_config(cls, config: dict[str, Any] | str | os.PathLike[str]) -> RopeScaling:
        """From a config as a dict, a ``config.json`` path, or a directory holding one."""
        if isinstance(config, dict):
            text = json.dumps(config)
        else:
            path = os.fspath(config)
            if os.path.isdir(path):
                path = os.path.join(path, "config.json")
            with open(path, encoding="utf-8") as f:
                text = f.read()
        return cls(_native.RopeScaling.from_config_json(text))

    @property
    def rope_type(self) -> str:
        """transformers' ``rope_type``."""
        return self._native.rope_type

    @property
    def head_dim(self) -> int:
        """Features per head."""
        return self._native.head_dim

    @property
    def dim(self) -> int:
        """Rotated features (``head_dim * partial_rotary_factor``)."""
        return self._native.dim

    def inv_freq(self, seq_len: int | None = None) -> np.ndarray:
        """The inverse frequencies at ``seq_len``, float64."""
        return np.asarray(self._native.inv_freq(seq_len), dtype=np.float64)

    def attention_factor(self, seq_len: int | None = None) -> float:
        """The factor on every cos and sin at ``seq_len``."""
        return self._native.attention_factor(seq_len)

    def cos_sin(self, position_ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(cos, sin)``, float32 ``[batch, seq, dim]`` for ``position_ids`` ``[batch, seq]``,
        as transformers' rotary embedding modules return them."""
        ids = np.ascontiguousarray(np.asarray(position_ids), dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.ndim != 2:
            raise ValueError(f"position_ids must be [batch, seq], got shape {ids.shape}")
        return self._native.cos_sin(ids)
