//! Layout conversion of q/k projections (`rotary::convert_projection`): attention scores with
//! `from`-layout RoPE on the original projections equal those with `to`-layout RoPE on the
//! converted ones, for all query/key position pairs of a short sequence.
//!
//! Tolerance: converting permutes the output rows of W and b, so every converted q or k is the
//! original one permuted, computed by the same f32 operations; both layouts rotate pair `i` by
//! the same f32 coefficients, so the rotated vectors are also permutations of each other. The
//! scores, summed in f64 over permuted terms, can then differ only by re-association:
//! `|delta| <= 2 d 2^-53 sum_j |q_j k_j|` (`d` = head dim). A wrong permutation changes scores by
//! O(|q| |k|).

mod common;

use common::Rng;
use proptest::prelude::*;
use rotary::{convert_projection, pair_permutation, Direction, Layout, Positions, Rope, Shape};

/// A q or k projection: weight `[heads * head_dim, embed]` (row-major) and bias.
#[derive(Debug, Clone)]
struct Projection {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl Projection {
    fn random(rng: &mut Rng, heads: usize, head_dim: usize, embed: usize) -> Projection {
        Projection {
            weight: rng.data(heads * head_dim * embed),
            bias: rng.data(heads * head_dim),
        }
    }

    fn convert(
        &self,
        heads: usize,
        head_dim: usize,
        rotary_dim: usize,
        from: Layout,
        to: Layout,
    ) -> Projection {
        let embed = self.weight.len() / self.bias.len();
        Projection {
            weight: convert_projection(&self.weight, embed, heads, head_dim, rotary_dim, from, to)
                .unwrap(),
            bias: convert_projection(&self.bias, 1, heads, head_dim, rotary_dim, from, to).unwrap(),
        }
    }

    /// `x W^T + b` for tokens `x: [seq, embed]`, giving `[seq, heads * head_dim]`: token-major.
    fn project(&self, x: &[f32], embed: usize) -> Vec<f32> {
        let out = self.bias.len();
        let mut y = Vec::with_capacity(x.len() / embed * out);
        for token in x.chunks_exact(embed) {
            for (o, &b) in self.bias.iter().enumerate() {
                let row = &self.weight[o * embed..(o + 1) * embed];
                y.push(row.iter().zip(token).fold(b, |acc, (w, v)| acc + w * v));
            }
        }
        y
    }
}

/// Scores `s[h][m][n] = <q_m^h, k_n^h>` (f64 sums) and the matching `sum_j |q_j k_j|`, after
/// rotating q and k with `layout` RoPE at `positions`.
#[allow(clippy::too_many_arguments)]
fn scores(
    wq: &Projection,
    wk: &Projection,
    x: &[f32],
    embed: usize,
    heads: usize,
    head_dim: usize,
    rotary_dim: usize,
    layout: Layout,
    positions: &[u32],
) -> Vec<(f64, f64)> {
    let seq = positions.len();
    let rope = Rope::new(head_dim, rotary_dim, 10_000.0, layout).unwrap();
    let shape = Shape::token_major(1, seq, heads, head_dim);
    let (mut q, mut k) = (wq.project(x, embed), wk.project(x, embed));
    rope.apply_qk_inplace(
        &mut q,
        shape,
        &mut k,
        shape,
        Positions::Explicit(positions),
        Direction::Forward,
    )
    .unwrap();
    let vec = |t: &[f32], s: usize, h: usize| -> Vec<f64> {
        let start = (s * heads + h) * head_dim;
        t[start..start + head_dim]
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    };
    let mut out = Vec::new();
    for h in 0..heads {
        for m in 0..seq {
            for n in 0..seq {
                let (qv, kv) = (vec(&q, m, h), vec(&k, n, h));
                out.push((
                    common::dot(&qv, &kv),
                    qv.iter().zip(&kv).map(|(a, b)| (a * b).abs()).sum(),
                ));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn scores_survive_layout_conversion(
        heads in 1usize..=4,
        head_dim in 2usize..=40,
        r in any::<prop::sample::Index>(),
        embed in 1usize..=24,
        positions in proptest::collection::vec(0u32..3000, 1..=6),
        seed in any::<u64>(),
    ) {
        let rotary_dim = 2 * (1 + r.index(head_dim / 2));
        let mut rng = Rng::new(seed);
        let wq = Projection::random(&mut rng, heads, head_dim, embed);
        let wk = Projection::random(&mut rng, heads, head_dim, embed);
        let x = rng.data(positions.len() * embed);
        for (from, to) in [(Layout::Interleaved, Layout::Half), (Layout::Half, Layout::Interleaved)] {
            let (cq, ck) = (
                wq.convert(heads, head_dim, rotary_dim, from, to),
                wk.convert(heads, head_dim, rotary_dim, from, to),
            );
            // Converting back restores the originals exactly.
            let back = cq.convert(heads, head_dim, rotary_dim, to, from);
            prop_assert_eq!(&back.weight, &wq.weight);
            prop_assert_eq!(&back.bias, &wq.bias);

            let original = scores(&wq, &wk, &x, embed, heads, head_dim, rotary_dim, from, &positions);
            let converted = scores(&cq, &ck, &x, embed, heads, head_dim, rotary_dim, to, &positions);
            for (e, (&(a, mag), &(b, _))) in original.iter().zip(&converted).enumerate() {
                let tol = 2.0 * head_dim as f64 * f64::EPSILON / 2.0 * mag;
                prop_assert!((a - b).abs() <= tol, "{from:?}->{to:?} score {e}: {a} vs {b}");
            }
        }
    }
}

/// The conversion is needed: with unconverted weights the other layout gives different scores
/// (so the property above is not vacuous), and the permutation moves pair coordinates.
#[test]
fn unconverted_weights_give_different_scores() {
    let (heads, head_dim, rotary_dim, embed) = (2, 64, 32, 16);
    let mut rng = Rng::new(11);
    let wq = Projection::random(&mut rng, heads, head_dim, embed);
    let wk = Projection::random(&mut rng, heads, head_dim, embed);
    let positions = [0, 1, 5, 17];
    let x = rng.data(positions.len() * embed);
    let a = scores(
        &wq,
        &wk,
        &x,
        embed,
        heads,
        head_dim,
        rotary_dim,
        Layout::Interleaved,
        &positions,
    );
    let b = scores(
        &wq,
        &wk,
        &x,
        embed,
        heads,
        head_dim,
        rotary_dim,
        Layout::Half,
        &positions,
    );
    let worst = a
        .iter()
        .zip(&b)
        .map(|(&(s, mag), &(t, _))| (s - t).abs() / mag)
        .fold(0.0, f64::max);
    assert!(worst > 1e-3, "layouts agree without conversion ({worst})");

    // Interleaved -> Half: Half pair i = (i, i + r/2) takes Interleaved pair i = (2i, 2i + 1);
    // dims past r stay.
    let perm = pair_permutation(8, 6, Layout::Interleaved, Layout::Half).unwrap();
    assert_eq!(perm, [0, 2, 4, 1, 3, 5, 6, 7]);
    let perm = pair_permutation(8, 6, Layout::Half, Layout::Interleaved).unwrap();
    assert_eq!(perm, [0, 3, 1, 4, 2, 5, 6, 7]);
}
