"""RoPE and RoFormer in Rust.

- the rotary core: :class:`RotaryEmbedding` (after rotary-embedding-torch),
  :func:`apply_rotary_pos_emb` (after transformers), :class:`RopeScaling` (a Hugging Face
  ``config.json``'s schedule);
- the models: :class:`Model` (RoFormer: ``forward``, ``fill_mask``, ``embed``, ``tokenize``)
  and :class:`VisionModel` (a ViT with 2D RoPE: ``forward``, ``embed``, ``classify``);
- training: :func:`train_mlm`, the library's masked-LM training run with the CLI's options.

Threads: where the bf16 products run on oneDNN's OpenMP threads (:func:`bf16_products_on_openmp`:
an AMX CPU, or ``ROFORMER_ONEDNN=1``), importing the package sets ``OMP_WAIT_POLICY=passive``
unless it is set already.

Errors: ``ValueError`` for bad shapes or arguments, ``FileNotFoundError`` / ``OSError`` for
files, :class:`ModelError` for a checkpoint that cannot be loaded.
"""

import os

from ._roformer_rs import ModelError, bf16_products_on_openmp, train_mlm
from .models import Model, VisionModel
from .rotary import RopeScaling, RotaryEmbedding, apply_rotary_pos_emb, apply_rotary_pos_emb_

# Where the bf16 products run on oneDNN (an AMX CPU, or ROFORMER_ONEDNN=1), its OpenMP threads
# sleep between products instead of spinning on the cores the rest of the model runs on.
# libgomp reads this when oneDNN first opens, at the first bf16 product, after this import; a
# value already set is kept.
if bf16_products_on_openmp():
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

__all__ = [
    "ModelError",
    "Model",
    "VisionModel",
    "RopeScaling",
    "RotaryEmbedding",
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_",
    "train_mlm",
    "bf16_products_on_openmp",
]
