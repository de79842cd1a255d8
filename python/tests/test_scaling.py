"""RopeScaling against transformers' modeling_rope_utils, on the rotary crate's committed
fixtures (crates/rotary/tests/fixtures/scaling/cases.json: transformers 5's inverse frequencies
and attention factors, in f32)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roformer_rs import RopeScaling, RotaryEmbedding, apply_rotary_pos_emb

from conftest import REPO

CASES = json.loads(
    (REPO / "crates" / "rotary" / "tests" / "fixtures" / "scaling" / "cases.json").read_text()
)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_inverse_frequencies_match_transformers(case: dict) -> None:
    scaling = RopeScaling.from_config(case["config"])
    for check in case["checks"]:
        # transformers computes in f32, we in f64: 1e-5 relative, as crates/rotary/tests/scaling.rs.
        np.testing.assert_allclose(
            scaling.inv_freq(check["seq_len"]), check["inv_freq"], rtol=1e-5, atol=0
        )
        assert scaling.attention_factor(check["seq_len"]) == pytest.approx(
            check["attention_factor"], rel=1e-5
        )


def test_cos_sin_in_the_half_layout_rotate_as_rotary_embedding(tmp_path) -> None:
    config = {"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 10000.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    scaling = RopeScaling.from_config(tmp_path)
    assert (scaling.rope_type, scaling.head_dim, scaling.dim) == ("default", 16, 16)
    cos, sin = scaling.cos_sin(np.arange(5)[None])
    assert cos.shape == (1, 5, 16) and cos.dtype == np.float32
    q = np.random.default_rng(1).standard_normal((1, 4, 5, 16)).astype(np.float32)
    rq, _ = apply_rotary_pos_emb(q, q, cos, sin)
    half = RotaryEmbedding(16, interleaved=False)
    np.testing.assert_allclose(rq, half.rotate_queries_or_keys(q), atol=1e-5)


def test_yarn_scales_cos_and_sin_by_its_attention_factor() -> None:
    config = {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
    }
    scaling = RopeScaling.from_config(config)
    cos, sin = scaling.cos_sin([[0]])
    assert cos[0, 0, 0] == pytest.approx(scaling.attention_factor(), rel=1e-6)
    assert scaling.attention_factor() == pytest.approx(0.1 * np.log(4.0) + 1, rel=1e-6)


@pytest.mark.parametrize(
    "config",
    [
        {"hidden_size": 64, "num_attention_heads": 4, "rope_scaling": {"rope_type": "warp"}},
        {"hidden_size": 64, "num_attention_heads": 4, "rope_scaling": {"rope_type": "linear"}},
        {"hidden_size": 64},
    ],
)
def test_bad_configs_raise_value_error(config: dict) -> None:
    with pytest.raises(ValueError):
        RopeScaling.from_config(config)


def test_missing_config_file_is_file_not_found(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        RopeScaling.from_config(tmp_path / "config.json")


def test_negative_positions_raise_value_error() -> None:
    scaling = RopeScaling.from_config({"hidden_size": 64, "num_attention_heads": 4})
    with pytest.raises(ValueError):
        scaling.cos_sin([[-1, 0]])
