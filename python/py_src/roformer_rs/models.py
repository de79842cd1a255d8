"""RoFormer text models and the ViT with 2D RoPE, with the library's pipelines.

``Model`` follows transformers' conventions: ``forward`` returns ``last_hidden_state`` (and
``logits`` with a masked-LM head) as numpy arrays, ``fill_mask`` returns the ``fill-mask``
pipeline's list of ``{"score", "token", "token_str", "sequence"}`` dicts. ``VisionModel``'s
``classify`` returns the ``image-classification`` pipeline's ``{"score", "label"}`` dicts.
"""

from __future__ import annotations

import os
from typing import Any, Literal, Sequence, Union

import numpy as np

from . import _roformer_rs as _native

Image = Union[str, "os.PathLike[str]", bytes, np.ndarray]
"""A file path, an encoded PNG or JPEG, or uint8 pixels ``[h, w]`` or ``[h, w, 1 or 3]``."""


def _ids(x: Any, what: str) -> np.ndarray | None:
    if x is None:
        return None
    array = np.asarray(x)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise ValueError(f"{what} must be [batch, seq], got shape {array.shape}")
    if array.dtype.kind not in "iub":
        raise ValueError(f"{what} must hold integers, got {array.dtype}")
    if array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{what} holds values too large for int64")
    return np.ascontiguousarray(array, dtype=np.int64)


class Model:
    """A RoFormer checkpoint (with or without its masked-LM head) and its tokenizer."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str], precision: Literal["f32", "bf16"] = "f32"
    ) -> Model:
        """Loads a Hugging Face RoFormer directory (``config.json``, ``model.safetensors`` or
        ``pytorch_model.bin``, ``vocab.txt``). ``precision="bf16"`` runs the encoder's products
        in bf16 where the CPU has a native bf16 dot product (f32 elsewhere)."""
        return cls(_native.NativeModel.from_pretrained(os.fspath(path), precision))

    @classmethod
    def builtin(cls, precision: Literal["f32", "bf16"] = "f32") -> Model:
        """The built-in model: a small character-level masked LM of Chinese poetry."""
        return cls(_native.NativeModel.builtin(precision))

    @property
    def name(self) -> str:
        """The directory the model came from, or the built-in model's name."""
        return self._native.name

    @property
    def precision(self) -> str:
        """The precision the products run in: ``f32`` or ``bf16``."""
        return self._native.precision

    @property
    def hidden_size(self) -> int:
        """The size of a hidden state."""
        return self._native.hidden_size

    @property
    def has_mlm_head(self) -> bool:
        """Whether the checkpoint has a masked-LM head (``fill_mask`` and ``logits``)."""
        return self._native.has_mlm_head

    def forward(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        token_type_ids: Any = None,
    ) -> dict[str, np.ndarray]:
        """``{"last_hidden_state": [b, t, hidden]}`` and, with a masked-LM head,
        ``"logits": [b, t, vocab]``, float32. Inputs are integer arrays ``[b, t]`` (or ``[t]``)."""
        return self._native.forward(
            _ids(input_ids, "input_ids"),
            _ids(attention_mask, "attention_mask"),
            _ids(token_type_ids, "token_type_ids"),
        )

    __call__ = forward

    def fill_mask(self, text: str, top_k: int = 5) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
        """The ``top_k`` most likely tokens behind each ``[MASK]`` of ``text``: a list of
        ``{"score", "token", "token_str", "sequence"}``, or one such list per mask when there
        are several (transformers' fill-mask pipeline). A token id past the checkpoint's
        ``vocab.txt`` gives ``None`` as ``token_str`` and ``sequence``."""
        masks = [
            [
                {"score": score, "token": token, "token_str": token_str, "sequence": sequence}
                for score, token, token_str, sequence in candidates
            ]
            for candidates in self._native.fill_mask(text, top_k)
        ]
        return masks[0] if len(masks) == 1 else masks

    def embed(
        self,
        texts: str | Sequence[str],
        pooling: Literal["mean", "cls"] = "mean",
        normalize: bool = True,
    ) -> np.ndarray:
        """One vector per text, float32 ``[n, hidden]``: the mean of the last hidden states
        (or the ``[CLS]`` state), L2-normalised with ``normalize``."""
        if isinstance(texts, str):
            texts = [texts]
        return self._native.embed(list(texts), pooling, normalize)

    def tokenize(self, text: str) -> dict[str, list[Any]]:
        """``[CLS] text [SEP]``: ``input_ids``, ``tokens``, ``offsets`` (char ranges in
        ``text``, ``(0, 0)`` for special tokens), ``token_type_ids`` and ``attention_mask``."""
        ids, tokens, offsets, types, mask = self._native.tokenize(text)
        return {
            "input_ids": ids,
            "tokens": tokens,
            "offsets": offsets,
            "token_type_ids": types,
            "attention_mask": mask,
        }


def _image(x: Image) -> bytes | np.ndarray:
    if isinstance(x, (str, os.PathLike)):
        with open(x, "rb") as f:
            return f.read()
    if isinstance(x, bytes):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype != np.uint8:
            raise ValueError(f"an image array must be uint8, got {x.dtype}")
        return np.ascontiguousarray(x)
    raise ValueError(
        f"an image must be a path, bytes or a uint8 numpy array, got {type(x).__name__}"
    )


def _images(images: Image | Sequence[Image]) -> list[bytes | np.ndarray]:
    """One image or a list or tuple of them, as the native module reads them."""
    if isinstance(images, (str, os.PathLike, bytes, np.ndarray)):
        return [_image(images)]
    if not isinstance(images, (list, tuple)):
        raise ValueError(
            f"images must be an image or a list of images, got {type(images).__name__}"
        )
    return [_image(i) for i in images]


class VisionModel:
    """A ViT with 2D RoPE (DINOv3's architecture), with its image processor."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str]) -> VisionModel:
        """Loads a Hugging Face DINOv3 ViT directory (``config.json``, ``model.safetensors``,
        ``preprocessor_config.json`` or DINOv3's defaults)."""
        return cls(_native.NativeVisionModel.from_pretrained(os.fspath(path)))

    @classmethod
    def builtin(cls) -> VisionModel:
        """The built-in model: a small ViT classifier of Fashion-MNIST."""
        return cls(_native.NativeVisionModel.builtin())

    @property
    def name(self) -> str:
        """The directory the model came from, or the built-in model's name."""
        return self._native.name

    @property
    def hidden_size(self) -> int:
        """The size of an embedding."""
        return self._native.hidden_size

    @property
    def labels(self) -> list[str]:
        """The classifier's labels in id order (empty for a backbone)."""
        return self._native.labels

    def forward(self, pixel_values: Any) -> dict[str, np.ndarray]:
        """``{"last_hidden_state": [b, tokens, hidden], "pooler_output": [b, hidden]}``, plus
        ``"logits": [b, labels]`` with a classifier, float32, for preprocessed float
        ``pixel_values`` ``[b, c, h, w]`` (transformers' DINOv3 outputs)."""
        pixels = np.asarray(pixel_values)
        if pixels.ndim != 4:
            raise ValueError(f"pixel_values must be [b, c, h, w], got shape {pixels.shape}")
        return self._native.forward(np.ascontiguousarray(pixels, dtype=np.float32))

    __call__ = forward

    def embed(self, images: Image | Sequence[Image]) -> np.ndarray:
        """One embedding per image (the normed CLS token), float32 ``[n, hidden]``."""
        return self._native.embed(_images(images))

    def classify(
        self, images: Image | Sequence[Image], top_k: int = 5
    ) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
        """The ``top_k`` most probable labels, ``{"score", "label"}`` best first: one list, or
        one list per image when several are given."""
        single = isinstance(images, (str, os.PathLike, bytes, np.ndarray))
        found = [
            [{"score": score, "label": label} for label, score in labels]
            for labels in self._native.classify(_images(images), top_k)
        ]
        return found[0] if single else found
