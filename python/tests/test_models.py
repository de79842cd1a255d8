"""Model: the built-in poetry model end to end, a transformers fixture for parity, and every
error path (missing directory, broken checkpoint, bad inputs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import roformer_rs
from roformer_rs import Model

from conftest import ASSETS, MODEL_FIXTURES, broken_copy, read_safetensors


def test_fill_mask_has_the_pipeline_shape(poetry: Model) -> None:
    found = poetry.fill_mask("床前明月[MASK]，疑是地上霜。", top_k=3)
    assert [set(c) for c in found] == [{"score", "token", "token_str", "sequence"}] * 3
    scores = [c["score"] for c in found]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1
    best = found[0]
    assert best["sequence"] == f"床前明月{best['token_str']}，疑是地上霜。"
    # What `roformer fill-mask` prints for the same text (README): the same library.
    assert best["token_str"] == "影" and best["score"] == pytest.approx(0.184195, abs=1e-6)
    moon = poetry.fill_mask("举头望明[MASK]", top_k=1)[0]
    assert moon["token_str"] == "月" and moon["score"] > 0.7


def test_fill_mask_with_two_masks_gives_one_list_per_mask(poetry: Model) -> None:
    found = poetry.fill_mask("[MASK]前明月光，疑是地上[MASK]。", top_k=2)
    assert len(found) == 2 and all(len(m) == 2 for m in found)


def test_forward_returns_hidden_states_and_logits(poetry: Model) -> None:
    enc = poetry.tokenize("春眠不觉晓")
    out = poetry.forward([enc["input_ids"]])
    assert set(out) == {"last_hidden_state", "logits"}
    assert out["last_hidden_state"].shape == (1, 7, poetry.hidden_size)
    assert out["logits"].dtype == np.float32 and out["logits"].shape[:2] == (1, 7)


def test_forward_padding_does_not_change_the_real_tokens(poetry: Model) -> None:
    ids = poetry.tokenize("春眠不觉晓")["input_ids"]
    alone = poetry.forward([ids])["last_hidden_state"][0]
    padded = np.array([ids + [0, 0]])
    mask = np.array([[1] * len(ids) + [0, 0]])
    out = poetry.forward(padded, attention_mask=mask, token_type_ids=np.zeros_like(padded))
    np.testing.assert_allclose(out["last_hidden_state"][0, : len(ids)], alone, atol=1e-4)


def test_embed_is_normalised_and_puts_similar_texts_closer(poetry: Model) -> None:
    vectors = poetry.embed(["床前明月光", "床前明月光，疑是地上霜", "春眠不觉晓"])
    assert vectors.shape == (3, poetry.hidden_size) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    raw = poetry.embed("床前明月光", pooling="cls", normalize=False)
    assert raw.shape == (1, poetry.hidden_size) and abs(np.linalg.norm(raw) - 1) > 1e-3


def test_tokenize_gives_ids_and_char_offsets(poetry: Model) -> None:
    enc = poetry.tokenize("明月")
    assert enc["tokens"] == ["[CLS]", "明", "月", "[SEP]"]
    assert enc["offsets"] == [(0, 0), (0, 1), (1, 2), (0, 0)]
    assert enc["attention_mask"] == [1, 1, 1, 1] and enc["token_type_ids"] == [0, 0, 0, 0]
    assert len(enc["input_ids"]) == 4


def test_bf16_precision_agrees_with_f32(poetry: Model) -> None:
    bf16 = Model.builtin(precision="bf16")
    assert bf16.precision in ("bf16", "f32")  # f32 where the CPU has no bf16 dot product
    a = poetry.embed("床前明月光")
    b = bf16.embed("床前明月光")
    assert float(a[0] @ b[0]) > 0.99


def test_from_pretrained_loads_the_builtin_directory() -> None:
    model = Model.from_pretrained(ASSETS / "poetry-model")
    assert model.has_mlm_head and model.name.endswith("poetry-model")
    assert model.fill_mask("床前明月[MASK]", top_k=1)[0]["token_str"]


def _fixture_with_vocab(case: str, tmp_path: Path, words: int | None = None) -> Path:
    """A transformers fixture directory with a vocabulary (the fixtures have none) of `words`
    entries, by default the model's size."""
    target = tmp_path / case
    shutil.copytree(MODEL_FIXTURES / case, target)
    size = words or json.loads((target / "config.json").read_text())["vocab_size"]
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = special + [f"w{i}" for i in range(size - len(special))]
    (target / "vocab.txt").write_text("\n".join(words) + "\n")
    return target


def test_forward_matches_transformers_on_the_committed_fixture(tmp_path: Path) -> None:
    """transformers 5's RoFormerForMaskedLM outputs (scripts/make_roformer_fixtures.py):
    1e-4 absolute, as the Rust parity tests."""
    model = Model.from_pretrained(_fixture_with_vocab("mlm_gelu", tmp_path))
    ref = read_safetensors(MODEL_FIXTURES / "mlm_gelu" / "reference.safetensors")
    out = model.forward(
        ref["input_ids"], ref.get("attention_mask"), ref.get("token_type_ids")
    )
    np.testing.assert_allclose(out["last_hidden_state"], ref["last_hidden_state"], atol=1e-4)
    np.testing.assert_allclose(out["logits"], ref["logits"], atol=1e-4)


def test_fill_mask_names_no_token_past_the_vocabulary(tmp_path: Path) -> None:
    """A vocab.txt shorter than the model's vocabulary: candidates whose id has no entry come
    back with their id and score and ``None`` as token and sequence, never an invented text."""
    model = Model.from_pretrained(_fixture_with_vocab("mlm_gelu", tmp_path, words=8))
    size = json.loads((tmp_path / "mlm_gelu" / "config.json").read_text())["vocab_size"]
    found = model.fill_mask("[MASK]", top_k=size)
    assert len(found) == size
    assert abs(sum(c["score"] for c in found) - 1.0) < 1e-4
    for c in found:
        if c["token"] < 8:
            assert isinstance(c["token_str"], str) and isinstance(c["sequence"], str)
        else:
            assert c["token_str"] is None and c["sequence"] is None


def test_a_model_without_head_refuses_fill_mask(tmp_path: Path) -> None:
    model = Model.from_pretrained(_fixture_with_vocab("base_long_silu", tmp_path))
    assert not model.has_mlm_head
    assert "logits" not in model.forward([[2, 5, 3]])
    with pytest.raises(ValueError, match="masked-LM head"):
        model.fill_mask("[MASK]")


def test_missing_directory_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Model.from_pretrained(tmp_path / "nowhere")


def test_directory_without_files_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Model.from_pretrained(tmp_path)


def test_bad_checkpoint_is_model_error(tmp_path: Path) -> None:
    header = b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}"
    target = broken_copy(ASSETS / "poetry-model", tmp_path / "b", "model.safetensors", header)
    with pytest.raises(roformer_rs.ModelError):
        Model.from_pretrained(target)


def test_malformed_config_is_model_error(tmp_path: Path) -> None:
    config = b'{"hidden_size": "wide"}'
    target = broken_copy(ASSETS / "poetry-model", tmp_path / "c", "config.json", config)
    with pytest.raises(roformer_rs.ModelError):
        Model.from_pretrained(target)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.forward([[1, 2], [3]]),
        lambda m: m.forward(np.zeros((1, 2, 3), np.int64)),
        lambda m: m.forward([[1.5, 2.0]]),
        lambda m: m.forward([[10**9]]),
        lambda m: m.forward([[2, 3]], attention_mask=[[1, 1, 1]]),
        lambda m: m.forward([[2, 3]], attention_mask=[[1, 7]]),
        lambda m: m.fill_mask("no mask here"),
        lambda m: m.fill_mask("[MASK]", top_k=0),
        lambda m: m.embed(["x"], pooling="max"),
        lambda m: Model.builtin(precision="f8"),
    ],
)
def test_bad_inputs_raise_value_error(poetry: Model, call) -> None:
    with pytest.raises(ValueError):
        call(poetry)
