"""Arrays in and out of the native module.

The native kernels take C-contiguous numpy arrays of float32, float16, or bfloat16 viewed as
its uint16 bits. This module turns what a user passes (a numpy array, an ``ml_dtypes.bfloat16``
array, a torch CPU tensor) into such an array, sharing memory where the layout allows, and
turns the result back into the input's type.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np

ToUser = Callable[[np.ndarray], Any]


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _from_numpy(x: np.ndarray, what: str) -> tuple[np.ndarray, ToUser]:
    if x.dtype in (np.float32, np.float16):
        return x, _same
    if x.dtype.name == "bfloat16":
        dtype = x.dtype
        return x.view(np.uint16), lambda a: a.view(dtype)
    raise ValueError(f"{what} must be float32, float16 or bfloat16, got {x.dtype}")


def _from_torch(x: Any, what: str, torch: Any) -> tuple[np.ndarray, ToUser]:
    if x.device.type != "cpu":
        raise ValueError(f"{what} must be on the CPU, got a tensor on {x.device}")
    x = x.detach()
    if x.dtype == torch.bfloat16:
        bits = x.view(torch.int16).numpy().view(np.uint16)
        return bits, lambda a: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    if x.dtype in (torch.float32, torch.float16):
        return x.numpy(), torch.from_numpy
    raise ValueError(f"{what} must be float32, float16 or bfloat16, got {x.dtype}")


def to_native(x: Any, what: str = "x", writable: bool = False) -> tuple[np.ndarray, ToUser]:
    """The array the native module reads for ``x``, and how to give a result back as ``x``'s
    type.

    With ``writable``, the array shares ``x``'s memory (for in-place variants): a ``ValueError``
    if ``x`` is read-only or not C-contiguous. Without it, a copy is made only when ``x`` is not
    C-contiguous.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        array, back = _from_torch(x, what, torch)
    elif isinstance(x, np.ndarray):
        array, back = _from_numpy(x, what)
    else:
        raise ValueError(
            f"{what} must be a numpy array or a torch tensor, got {type(x).__name__}"
        )
    if writable:
        if not array.flags.c_contiguous:
            raise ValueError(f"{what} must be C-contiguous to be rotated in place")
        if not array.flags.writeable:
            raise ValueError(f"{what} is read-only and cannot be rotated in place")
        return array, back
    return np.ascontiguousarray(array), back


def float32_table(x: Any, what: str) -> np.ndarray:
    """A cos or sin table as a C-contiguous float32 numpy array."""
    array, _ = to_native(x, what)
    if array.dtype == np.uint16:
        # bfloat16 bits: widen exactly (bf16 is the top half of an f32).
        return (array.astype(np.uint32) << 16).view(np.float32)
    return np.ascontiguousarray(array, dtype=np.float32)
