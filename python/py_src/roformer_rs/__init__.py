"""RoPE and RoFormer in Rust.

- the rotary core: :class:`RotaryEmbedding` (after rotary-embedding-torch),
  :func:`apply_rotary_pos_emb` (after transformers), :class:`RopeScaling` (a Hugging Face
  ``config.json``'s schedule);
- the models: :class:`Model` (RoFormer: ``forward``, ``fill_mask``, ``embed``, ``tokenize``)
  and :class:`VisionModel` (a ViT with 2D RoPE: ``forward``, ``embed``, ``classify``);
- training: :func:`train_mlm`, the library's masked-LM training run with the CLI's options.

Errors: ``ValueError`` for bad shapes or arguments, ``FileNotFoundError`` / ``OSError`` for
files, :class:`ModelError` for a checkpoint that cannot be loaded.
"""

from ._roformer_rs import ModelError, train_mlm
from .models import Model, VisionModel
from .rotary import RopeScaling, RotaryEmbedding, apply_rotary_pos_emb, apply_rotary_pos_emb_

__all__ = [
    "ModelError",
    "Model",
    "VisionModel",
    "RopeScaling",
    "RotaryEmbedding",
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_",
    "train_mlm",
]
