"""Type stubs of the native module (``python/src``). Use the wrappers in ``roformer_rs``."""

import os
from typing import Any, Callable, Sequence

import numpy as np
import numpy.typing as npt

class ModelError(Exception):
    """A checkpoint or config that cannot be loaded."""

class RotaryCore:
    def __init__(
        self,
        dim: int,
        theta: float = 10000.0,
        interleaved: bool = True,
        freqs_for: str = "lang",
        max_freq: float = 10.0,
        interpolate_factor: float = 1.0,
        theta_rescale_factor: float = 1.0,
    ) -> None: ...
    def inv_freq(self) -> list[float]: ...
    def rotate(self, x: np.ndarray, seq_dim: int, offset: int = 0) -> np.ndarray: ...
    def rotate_(self, x: np.ndarray, seq_dim: int, offset: int = 0) -> None: ...
    def rotate_axial(
        self, x: np.ndarray, axes: int, offsets: Sequence[float] | None = None
    ) -> np.ndarray: ...
    def rotate_axial_(
        self, x: np.ndarray, axes: int, offsets: Sequence[float] | None = None
    ) -> None: ...

def apply_rotary_pos_emb(
    q: np.ndarray,
    k: np.ndarray,
    cos: npt.NDArray[np.float32],
    sin: npt.NDArray[np.float32],
    unsqueeze_dim: int = 1,
) -> tuple[np.ndarray, np.ndarray]: ...

def apply_rotary_pos_emb_(
    q: np.ndarray,
    k: np.ndarray,
    cos: npt.NDArray[np.float32],
    sin: npt.NDArray[np.float32],
    unsqueeze_dim: int = 1,
) -> None: ...

class RopeScaling:
    @staticmethod
    def from_config_json(text: str) -> RopeScaling: ...
    @property
    def rope_type(self) -> str: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def base(self) -> float: ...
    def inv_freq(self, seq_len: int | None = None) -> list[float]: ...
    def attention_factor(self, seq_len: int | None = None) -> float: ...
    def cos_sin(
        self, position_ids: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...

class NativeModel:
    @staticmethod
    def from_pretrained(dir: str | os.PathLike[str], precision: str = "f32") -> NativeModel: ...
    @staticmethod
    def builtin(precision: str = "f32") -> NativeModel: ...
    @property
    def name(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def has_mlm_head(self) -> bool: ...
    def forward(
        self,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64] | None = None,
        token_type_ids: npt.NDArray[np.int64] | None = None,
    ) -> dict[str, npt.NDArray[np.float32]]: ...
    def fill_mask(
        self, text: str, top_k: int = 5
    ) -> list[list[tuple[float, int, str | None, str | None]]]: ...
    def embed(
        self, texts: list[str], pooling: str = "mean", normalize: bool = True
    ) -> npt.NDArray[np.float32]: ...
    def tokenize(
        self, text: str
    ) -> tuple[list[int], list[str], list[tuple[int, int]], list[int], list[int]]: ...

class NativeVisionModel:
    @staticmethod
    def from_pretrained(dir: str | os.PathLike[str]) -> NativeVisionModel: ...
    @staticmethod
    def builtin() -> NativeVisionModel: ...
    @property
    def name(self) -> str: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def labels(self) -> list[str]: ...
    def forward(self, pixel_values: npt.NDArray[np.float32]) -> dict[str, npt.NDArray[np.float32]]: ...
    def embed(self, images: list[bytes | npt.NDArray[np.uint8]]) -> npt.NDArray[np.float32]: ...
    def classify(
        self, images: list[bytes | npt.NDArray[np.uint8]], top_k: int = 5
    ) -> list[list[tuple[str, float]]]: ...

def train_mlm(
    out: str | os.PathLike[str],
    corpus: Sequence[str | os.PathLike[str]],
    steps: int,
    *,
    init: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    vocab: str | os.PathLike[str] | None = None,
    batch_size: int = 16,
    seq_len: int = 128,
    lr: float = 5e-4,
    warmup: int = 0,
    decay: str = "linear",
    weight_decay: float = 0.01,
    max_grad_norm: float = 1.0,
    grad_accum: int = 1,
    seed: int = 0,
    eval_every: int = 0,
    save_every: int = 0,
    eval_batches: int = 50,
    validation: float = 0.05,
    line_by_line: bool = False,
    whole_word: bool = False,
    precision: str = "f32",
    resume: bool = False,
    progress: Callable[[dict[str, Any]], object] | None = None,
) -> dict[str, Any]:
    """Trains a masked LM on ``corpus`` (text, JSON-lines or chinese-poetry JSON files, or
    directories of them) into ``out/checkpoint``, starting from ``init`` (a checkpoint
    directory), from scratch on ``config`` and ``vocab`` (a ``config.json`` and a ``vocab.txt``),
    or from the built-in poetry model, with ``roformer train mlm``'s options.
    ``progress`` receives a dict per event (``{"event": "step", "step", "loss", "lr",
    "grad_norm", "tokens", "seconds"}``, ``"eval"``, ``"saved"``); an exception it raises,
    or Ctrl-C, stops the run at the next micro-batch with the last completed step saved, then
    propagates. Returns ``{"outcome": "finished" | "stopped", "steps", "last_eval"}``."""

def bf16_products_on_openmp() -> bool: ...
