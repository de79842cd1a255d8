"""VisionModel: the built-in Fashion-MNIST classifier on real test images (arrays, PNG bytes,
paths), and every error path."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

import roformer_rs
from roformer_rs import VisionModel

from conftest import ASSETS, IMAGE_FIXTURES, VISION_FIXTURES, broken_copy, read_safetensors


def fashion_test_images() -> tuple[np.ndarray, np.ndarray]:
    """The committed Fashion-MNIST test images ``[n, 28, 28]`` uint8 and their labels."""
    base = IMAGE_FIXTURES / "fashion-mnist"
    raw = gzip.decompress((base / "t10k-images-idx3-ubyte.gz").read_bytes())
    _, n, h, w = struct.unpack(">IIII", raw[:16])
    images = np.frombuffer(raw[16:], dtype=np.uint8).reshape(n, h, w)
    labels = np.frombuffer(gzip.decompress((base / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8)
    return images, labels


def test_classify_gets_most_test_images_right(fashion: VisionModel) -> None:
    images, labels = fashion_test_images()
    found = fashion.classify(list(images[:40]), top_k=1)
    right = sum(f[0]["label"] == fashion.labels[y] for f, y in zip(found, labels[:40]))
    assert right >= 30, f"{right} of 40"  # the model card's test accuracy is 92.5 %


def test_classify_has_the_pipeline_shape(fashion: VisionModel) -> None:
    images, _ = fashion_test_images()
    found = fashion.classify(images[0], top_k=3)
    assert [set(f) for f in found] == [{"score", "label"}] * 3
    assert found[0]["score"] >= found[1]["score"] >= found[2]["score"]
    assert len(fashion.labels) == 10 and fashion.labels[9] == "Ankle boot"


def test_embed_gives_one_vector_per_image_in_any_form(fashion: VisionModel, tmp_path: Path) -> None:
    png = IMAGE_FIXTURES / "grey.png"
    vectors = fashion.embed([png, str(png), png.read_bytes()])
    assert vectors.shape == (3, fashion.hidden_size) and vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors[0], vectors[1])
    np.testing.assert_array_equal(vectors[0], vectors[2])
    rgb = fashion.embed(IMAGE_FIXTURES / "rgb.jpg")  # averaged to grey for a 1-channel model
    assert rgb.shape == (1, fashion.hidden_size) and np.isfinite(rgb).all()


def test_embed_of_an_array_matches_its_png(fashion: VisionModel) -> None:
    images, _ = fashion_test_images()
    a = fashion.embed(images[3])
    b = fashion.embed(images[3][:, :, None])
    np.testing.assert_array_equal(a, b)


def test_from_pretrained_loads_the_builtin_directory() -> None:
    model = VisionModel.from_pretrained(ASSETS / "fashion-model")
    images, _ = fashion_test_images()
    builtin = VisionModel.builtin()
    np.testing.assert_array_equal(model.embed(images[0]), builtin.embed(images[0]))


def test_forward_matches_transformers_on_the_committed_fixture() -> None:
    """transformers' DINOv3ViTModel outputs (scripts/make_dinov3_fixtures.py) at four image
    sizes: 1e-4 absolute, as the Rust parity tests allow for f32."""
    case = VISION_FIXTURES / "base"
    model = VisionModel.from_pretrained(case)
    ref = read_safetensors(case / "reference.safetensors")
    for i in range(4):
        out = model.forward(ref[f"pixel_values_{i}"])
        assert "logits" not in out
        np.testing.assert_allclose(out["last_hidden_state"], ref[f"last_hidden_state_{i}"], atol=1e-4)
        np.testing.assert_allclose(out["pooler_output"], ref[f"pooler_output_{i}"], atol=1e-4)


def test_forward_of_the_classifier_adds_logits(fashion: VisionModel) -> None:
    out = fashion.forward(np.zeros((2, 1, 28, 28), np.float32))
    assert out["logits"].shape == (2, 10) and out["pooler_output"].shape == (2, fashion.hidden_size)


def test_missing_directory_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        VisionModel.from_pretrained(tmp_path / "nowhere")


def test_missing_image_file_is_file_not_found(fashion: VisionModel, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        fashion.embed(tmp_path / "nowhere.png")


def test_bad_checkpoint_is_model_error(tmp_path: Path) -> None:
    config = b'{"model_type": "dinov3_vit", "hidden_size": 7, "num_attention_heads": 2}'
    target = broken_copy(ASSETS / "fashion-model", tmp_path / "b", "config.json", config)
    with pytest.raises(roformer_rs.ModelError):
        VisionModel.from_pretrained(target)


def test_truncated_weights_are_model_error(tmp_path: Path) -> None:
    data = (ASSETS / "fashion-model" / "model.safetensors").read_bytes()
    half = data[: len(data) // 2]
    target = broken_copy(ASSETS / "fashion-model", tmp_path / "t", "model.safetensors", half)
    with pytest.raises(roformer_rs.ModelError):
        VisionModel.from_pretrained(target)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.embed(b"not an image"),
        lambda m: m.embed(np.zeros((28, 28), np.float32)),
        lambda m: m.embed(np.zeros((28, 28, 2), np.uint8)),
        lambda m: m.embed(np.zeros((28,), np.uint8)),
        lambda m: m.embed(12),
        lambda m: m.classify(np.zeros((28, 28), np.uint8), top_k=0),
        lambda m: m.forward(np.zeros((1, 28, 28), np.float32)),
        lambda m: m.forward(np.zeros((1, 3, 28, 28), np.float32)),
        lambda m: m.forward(np.zeros((1, 1, 2, 2), np.float32)),
    ],
)
def test_bad_images_raise_value_error(fashion: VisionModel, call) -> None:
    with pytest.raises(ValueError):
        call(fashion)
