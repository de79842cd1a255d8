"""Parity with rotary-embedding-torch 0.9.1 and transformers' apply_rotary_pos_emb, on the
committed fixtures (scripts/make_rotary_torch_fixtures.py), so that no torch is needed; and,
where torch is installed, torch CPU tensors in and out.

Tolerances: the references compute angles in float32 (``position * inv_freq``, then cos/sin),
ours in float64 rounded once; the difference grows with the position, about 1e-7 relative per
unit of angle: 5e-5 absolute up to position 20, 1e-3 at positions near 1300. float16 outputs are
rounded once on both sides: one float16 ulp (2e-3 for values of size 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roformer_rs import RotaryEmbedding, apply_rotary_pos_emb

from conftest import FIXTURES

DATA = np.load(FIXTURES / "rotary_torch.npz")


def case(name: str) -> tuple[dict, dict[str, np.ndarray]]:
    args = json.loads(str(DATA[f"{name}.args"]))
    arrays = {k.split(".", 1)[1]: DATA[k] for k in DATA.files if k.startswith(f"{name}.") and not k.endswith(".args")}
    return args, arrays


@pytest.mark.parametrize(
    "name,atol",
    [("partial_offset", 5e-5), ("token_major", 5e-5), ("interpolated_rescaled", 5e-5), ("long", 1e-3), ("float16", 2e-3)],
)
def test_rotate_queries_or_keys_matches_rotary_embedding_torch(name: str, atol: float) -> None:
    args, a = case(name)
    out = RotaryEmbedding(**args["init"]).rotate_queries_or_keys(a["x"], **args["call"])
    assert out.dtype == a["out"].dtype
    np.testing.assert_allclose(out.astype(np.float32), a["out"].astype(np.float32), atol=atol)


def test_cached_keys_match_rotary_embedding_torch() -> None:
    args, a = case("cached_keys")
    rq, rk = RotaryEmbedding(**args["init"]).rotate_queries_with_cached_keys(a["q"], a["k"], **args["call"])
    np.testing.assert_allclose(rq, a["rq"], atol=5e-5)
    np.testing.assert_allclose(rk, a["rk"], atol=5e-5)


@pytest.mark.parametrize("name", ["axial_pixel", "axial_lang"])
def test_axial_matches_get_axial_freqs(name: str) -> None:
    args, a = case(name)
    out = RotaryEmbedding(**args["init"]).rotate_axial(a["x"], **args["call"])
    np.testing.assert_allclose(out, a["out"], atol=5e-5)


def test_apply_rotary_pos_emb_matches_transformers() -> None:
    _, a = case("transformers")
    rq, rk = apply_rotary_pos_emb(a["q"], a["k"], a["cos"], a["sin"])
    np.testing.assert_allclose(rq, a["rq"], atol=1e-6)
    np.testing.assert_allclose(rk, a["rk"], atol=1e-6)


def test_torch_tensors_give_the_numpy_answers_in_their_own_type() -> None:
    torch = pytest.importorskip("torch")
    rope = RotaryEmbedding(16)
    x = np.random.default_rng(3).standard_normal((2, 3, 5, 16)).astype(np.float32)
    want = rope.rotate_queries_or_keys(x, offset=2)
    for dtype, atol in [(torch.float32, 0.0), (torch.float16, 4e-3), (torch.bfloat16, 3e-2)]:
        t = torch.from_numpy(x).to(dtype)
        out = rope.rotate_queries_or_keys(t, offset=2)
        assert isinstance(out, torch.Tensor) and out.dtype == dtype
        np.testing.assert_allclose(out.float().numpy(), want, atol=atol)
    inplace = torch.from_numpy(x.copy())
    assert rope.rotate_queries_or_keys_(inplace, offset=2) is inplace
    np.testing.assert_array_equal(inplace.numpy(), want)
    with pytest.raises(ValueError):
        rope.rotate_queries_or_keys(torch.zeros(2, 16, dtype=torch.float64))


def test_live_rotary_embedding_torch_on_random_shapes() -> None:
    torch = pytest.importorskip("torch")
    ret = pytest.importorskip("rotary_embedding_torch")
    for dim, shape, offset in [(8, (1, 2, 7, 8), 0), (24, (3, 1, 11, 40), 9), (64, (2, 4, 33, 64), 100)]:
        theirs = ret.RotaryEmbedding(dim=dim)
        ours = RotaryEmbedding(dim)
        x = torch.randn(shape)
        want = theirs.rotate_queries_or_keys(x, offset=offset)
        np.testing.assert_allclose(ours.rotate_queries_or_keys(x, offset=offset).numpy(), want.numpy(), atol=2e-4)
