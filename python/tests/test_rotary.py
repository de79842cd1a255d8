"""RotaryEmbedding and apply_rotary_pos_emb against float64 numpy references, every dtype,
in place and not, and every refusal."""

from __future__ import annotations

import numpy as np
import pytest

import roformer_rs
from roformer_rs import RotaryEmbedding, apply_rotary_pos_emb, apply_rotary_pos_emb_

from conftest import lang_inv_freq, rotate_reference

RNG = np.random.default_rng(7)


def randn(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("interleaved", [True, False])
def test_rotate_queries_or_keys_matches_the_reference(interleaved: bool) -> None:
    rope = RotaryEmbedding(32, interleaved=interleaved)
    x = randn(2, 3, 17, 32)
    out = rope.rotate_queries_or_keys(x)
    want = rotate_reference(x, np.arange(17), lang_inv_freq(32), interleaved)
    assert out.shape == x.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, want, atol=2e-5)
    np.testing.assert_allclose(rope.inv_freq, lang_inv_freq(32), rtol=1e-15)


def test_partial_rotary_leaves_the_rest_untouched_and_offset_shifts_positions() -> None:
    rope = RotaryEmbedding(16)
    x = randn(1, 2, 9, 48)
    out = rope.rotate_queries_or_keys(x, offset=5)
    want = rotate_reference(x, np.arange(5, 14), lang_inv_freq(16), True)
    np.testing.assert_allclose(out, want, atol=2e-5)
    assert np.array_equal(out[..., 16:], x[..., 16:])


def test_seq_dim_minus_three_is_token_major() -> None:
    rope = RotaryEmbedding(8, seq_before_head_dim=True)
    x = randn(2, 5, 3, 8)  # [b, seq, heads, d]
    out = rope.rotate_queries_or_keys(x)
    head_major = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    want = rope.rotate_queries_or_keys(head_major, seq_dim=-2).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(out, want)


def test_theta_interpolation_and_rescale() -> None:
    rope = RotaryEmbedding(16, theta=500.0, interpolate_factor=4.0, theta_rescale_factor=2.0)
    x = randn(3, 11, 16)
    theta = 500.0 * 2.0 ** (16 / 14)
    want = rotate_reference(x, np.arange(11) / 4.0, lang_inv_freq(16, theta), True)
    np.testing.assert_allclose(rope.rotate_queries_or_keys(x), want, atol=2e-5)


@pytest.mark.parametrize("dtype,atol", [(np.float16, 4e-3)])
def test_half_precision_keeps_its_dtype(dtype, atol: float) -> None:
    rope = RotaryEmbedding(32)
    x = randn(2, 4, 32, dtype=dtype)
    out = rope.rotate_queries_or_keys(x)
    assert out.dtype == dtype
    want = rotate_reference(x, np.arange(4), lang_inv_freq(32), True)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=atol)


def test_bfloat16_through_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rope = RotaryEmbedding(32)
    x = randn(2, 4, 32).astype(ml_dtypes.bfloat16)
    out = rope.rotate_queries_or_keys(x)
    assert out.dtype == ml_dtypes.bfloat16
    want = rotate_reference(x.astype(np.float64), np.arange(4), lang_inv_freq(32), True)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=3e-2)


def test_in_place_equals_out_of_place() -> None:
    rope = RotaryEmbedding(16)
    x = randn(2, 2, 7, 16)
    want = rope.rotate_queries_or_keys(x, offset=3)
    same = rope.rotate_queries_or_keys_(x, offset=3)
    assert same is x
    np.testing.assert_array_equal(x, want)


def test_non_contiguous_input_is_copied_not_refused() -> None:
    rope = RotaryEmbedding(8)
    x = randn(4, 6, 8)
    view = x[:, ::2]
    np.testing.assert_array_equal(
        rope.rotate_queries_or_keys(view), rope.rotate_queries_or_keys(view.copy())
    )


def test_rotate_queries_with_cached_keys() -> None:
    rope = RotaryEmbedding(16)
    q, k = randn(1, 2, 3, 16), randn(1, 2, 10, 16)
    rq, rk = rope.rotate_queries_with_cached_keys(q, k)
    np.testing.assert_array_equal(rq, rope.rotate_queries_or_keys(q, offset=7))
    np.testing.assert_array_equal(rk, rope.rotate_queries_or_keys(k))
    # Relativity: <R_m q, R_n k> depends on n - m only.
    scores = np.einsum("bhid,bhjd->bhij", rq, rk)
    shifted = np.einsum(
        "bhid,bhjd->bhij",
        rope.rotate_queries_or_keys(q, offset=107),
        rope.rotate_queries_or_keys(k, offset=100),
    )
    np.testing.assert_allclose(scores, shifted, atol=1e-3)


def test_axial_rotation_rotates_each_axis_with_its_own_features() -> None:
    rope = RotaryEmbedding(8)
    x = randn(2, 3, 5, 24)  # [b, h, w, d]: 8 features for rows, 8 for columns, 8 untouched
    out = rope.rotate_axial(x, axes=2)
    rows = np.repeat(np.arange(3), 5)
    cols = np.tile(np.arange(5), 3)
    flat = x.reshape(2, 15, 24)
    want = flat.astype(np.float64).copy()
    want[..., :8] = rotate_reference(flat[..., :8], rows, lang_inv_freq(8), True)
    want[..., 8:16] = rotate_reference(flat[..., 8:16], cols, lang_inv_freq(8), True)
    np.testing.assert_allclose(out.reshape(2, 15, 24), want, atol=2e-5)
    inplace = x.copy()
    rope.rotate_axial_(inplace, axes=2)
    np.testing.assert_array_equal(inplace, out)


def test_apply_rotary_pos_emb_matches_rotate_half() -> None:
    q, k = randn(2, 4, 6, 16), randn(2, 2, 6, 16)
    angles = np.arange(6)[:, None] * lang_inv_freq(16)[None, :]
    emb = np.concatenate([angles, angles], axis=-1)[None].repeat(2, axis=0)  # [b, seq, 16]
    cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)

    def reference(x: np.ndarray) -> np.ndarray:
        x1, x2 = x[..., :8], x[..., 8:]
        rotated = np.concatenate([-x2, x1], axis=-1)
        return x * cos[:, None] + rotated * sin[:, None]

    rq, rk = apply_rotary_pos_emb(q, k, cos, sin)
    np.testing.assert_allclose(rq, reference(q), atol=1e-5)
    np.testing.assert_allclose(rk, reference(k), atol=1e-5)
    # The same as the half-layout RotaryEmbedding.
    half = RotaryEmbedding(16, interleaved=False)
    np.testing.assert_allclose(rq, half.rotate_queries_or_keys(q), atol=1e-5)
    # unsqueeze_dim=2: [b, seq, heads, d].
    tq, tk = apply_rotary_pos_emb(
        np.ascontiguousarray(q.transpose(0, 2, 1, 3)),
        np.ascontiguousarray(k.transpose(0, 2, 1, 3)),
        cos,
        sin,
        unsqueeze_dim=2,
    )
    np.testing.assert_array_equal(tq.transpose(0, 2, 1, 3), rq)
    # In place: the same values, in q's and k's own memory.
    q2, k2 = q.copy(), k.copy()
    out = apply_rotary_pos_emb_(q2, k2, cos, sin)
    assert out[0] is q2 and out[1] is k2
    np.testing.assert_array_equal(q2, rq)
    np.testing.assert_array_equal(k2, rk)
    half16 = q.astype(np.float16)
    apply_rotary_pos_emb_(half16, k.astype(np.float16), cos, sin)
    np.testing.assert_allclose(half16.astype(np.float32), rq, atol=4e-3)


@pytest.mark.parametrize(
    "call",
    [
        lambda: RotaryEmbedding(7),
        lambda: RotaryEmbedding(0),
        lambda: RotaryEmbedding(8, theta=-1.0),
        lambda: RotaryEmbedding(8, freqs_for="constant"),
        lambda: RotaryEmbedding(8, interpolate_factor=0.5),
        lambda: RotaryEmbedding(16).rotate_queries_or_keys(randn(2, 3, 8)),
        lambda: RotaryEmbedding(8).rotate_queries_or_keys(randn(2, 3, 8), seq_dim=-1),
        lambda: RotaryEmbedding(8).rotate_queries_or_keys(randn(2, 3, 8), seq_dim=5),
        lambda: RotaryEmbedding(8).rotate_queries_or_keys(np.zeros((2, 8), np.float64)),
        lambda: RotaryEmbedding(8).rotate_queries_or_keys([[1.0] * 8]),
        lambda: RotaryEmbedding(8).rotate_queries_or_keys_(randn(4, 6, 8)[:, ::2]),
        lambda: RotaryEmbedding(8).rotate_queries_with_cached_keys(randn(5, 8), randn(3, 8)),
        lambda: RotaryEmbedding(8).rotate_axial(randn(3, 4, 8), axes=3),
        lambda: RotaryEmbedding(8).rotate_axial(randn(3, 4, 8), axes=2),
        lambda: RotaryEmbedding(4).rotate_axial(randn(3, 4, 8), axes=2, offsets=(1.0,)),
        lambda: apply_rotary_pos_emb(randn(1, 2, 3, 8), randn(1, 2, 3, 8), randn(1, 4, 8), randn(1, 4, 8)),
        lambda: apply_rotary_pos_emb(randn(1, 2, 3, 8), randn(1, 2, 3, 8), randn(1, 3, 10), randn(1, 3, 10)),
        lambda: apply_rotary_pos_emb(randn(2, 3, 8), randn(2, 3, 8), randn(1, 3, 8), randn(1, 3, 8)),
        lambda: apply_rotary_pos_emb(randn(1, 2, 3, 8), randn(1, 2, 3, 8), randn(1, 3, 8), randn(1, 3, 6)),
        lambda: apply_rotary_pos_emb(randn(1, 2, 3, 8), randn(1, 2, 3, 8), randn(1, 3, 8), randn(1, 3, 8), unsqueeze_dim=3),
        lambda: apply_rotary_pos_emb_(randn(1, 2, 6, 8)[:, :, ::2], randn(1, 2, 3, 8), randn(1, 3, 8), randn(1, 3, 8)),
        lambda: apply_rotary_pos_emb_(randn(1, 2, 3, 8), randn(1, 2, 4, 8), randn(1, 3, 8), randn(1, 3, 8)),
    ],
)
def test_bad_arguments_raise_value_error(call) -> None:
    with pytest.raises(ValueError):
        call()


def test_a_refused_in_place_call_changes_nothing() -> None:
    q, k = randn(1, 2, 3, 8), randn(1, 2, 4, 8)
    q0 = q.copy()
    with pytest.raises(ValueError):
        apply_rotary_pos_emb_(q, k, randn(1, 3, 8), randn(1, 3, 8))
    np.testing.assert_array_equal(q, q0)


def test_read_only_arrays_are_refused_in_place_but_rotated_out_of_place() -> None:
    x = randn(3, 8)
    x.setflags(write=False)
    rope = RotaryEmbedding(8)
    with pytest.raises(ValueError, match="read-only"):
        rope.rotate_queries_or_keys_(x)
    assert rope.rotate_queries_or_keys(x).shape == (3, 8)


def test_the_exceptions_are_exported() -> None:
    assert issubclass(roformer_rs.ModelError, Exception)
    assert set(roformer_rs.__all__) >= {"RotaryEmbedding", "apply_rotary_pos_emb", "Model", "VisionModel"}
