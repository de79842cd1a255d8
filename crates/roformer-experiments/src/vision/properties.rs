//! The seed's two properties of 2D RoPE, measured on the rotations each rotary arm trained
//! (its sweep-seed model at its best rate), and the one property its argument against a
//! flattened index rests on.
//!
//! - **Relativity**: the score of a query at patch `p` and a key at patch `p'`,
//!   `(R(p) q)^T (R(p') k)`, depends on `p' - p` alone. Measured with seeded Gaussian `q` and
//!   `k` per head, rotated by the rotary crate's kernels at every patch of a grid: for each
//!   offset, the range of the scores of the pairs at that offset, as a share of the range of
//!   all scores (0: relative). The `absolute` arm is measured the same way on the
//!   position-only scores of its first layer, `(W_q LN(e_p) + b_q)^T (W_k LN(e_p') + b_k)`
//!   per head, for contrast.
//! - **Invertibility**: the position can be read back from `R(p)`. Measured as the
//!   separation, `min over p != p'` of the RMS over pairs of `|exp(i a(p)) - exp(i a(p'))|`
//!   (all heads and layers together, and the weakest single head), and the share of patches
//!   whose nearest rotation on the grid is their own alone.
//! - **Neighbours**: the seed's case against flattening: the rotation distance to the patch
//!   below over the distance to the patch to the right, averaged over the grid (1: rows and
//!   columns alike; a flattened index puts the patch below `cols` steps away).

use std::collections::{BTreeMap, HashMap};

use anyhow::{bail, Context};
use candle_core::{Device, Tensor};
use roformer::vision::positions::{flat_positions, grid_positions, Placement};
use roformer::vision::rope::fixed_rope;
use roformer::vision::{Coordinates, PatchGrid, PositionKind, VisionConfig};
use rotary::{Direction, Layout, NdRope, Shape};
use serde::Serialize;

use super::plan::{conventions, model_of, Plan};
use super::runs::Trained;

/// The seed of the probe vectors `q` and `k`.
const PROBE_SEED: u64 = 3;

/// Two positions closer than this (RMS chord) count as the same rotation.
const SAME: f64 = 1e-6;

/// One arm's properties.
#[derive(Debug, Clone, Serialize)]
pub struct ArmProperties {
    /// The position kind.
    pub arm: PositionKind,
    /// The run measured.
    pub run: String,
    /// Per grid and reading.
    pub grids: Vec<GridProperties>,
}

/// The properties on one grid under one reading.
#[derive(Debug, Clone, Serialize)]
pub struct GridProperties {
    /// The image side (the grid is `side / patch` a side).
    pub side: usize,
    /// How the patches were placed.
    pub coordinates: Coordinates,
    /// The largest share of the score range that pairs at one offset spread over (0:
    /// relative).
    pub relativity_error: f64,
    /// The rotations' invertibility and neighbours (`None` for `absolute`).
    pub rotations: Option<RotationStats>,
}

/// How distinct and how even a model's rotations are over a grid.
#[derive(Debug, Clone, Serialize)]
pub struct RotationStats {
    /// The separation of the whole model's rotations (all heads and layers).
    pub separation: f64,
    /// The separation of the weakest head.
    pub weakest_head: f64,
    /// The share of patches whose rotation is theirs alone.
    pub recovered: f64,
    /// The mean ratio of the distance to the patch below to that to the patch to the right
    /// (`None` for a grid of one row or column).
    pub neighbour_ratio: Option<f64>,
}

/// The properties of every rotary arm and of `absolute`, on each arm's sweep-seed final run.
///
/// # Errors
/// Unreadable checkpoints; the rotary crate's errors.
pub fn measure(
    plan: &Plan,
    model: &VisionConfig,
    finals: &[Trained],
) -> anyhow::Result<Vec<ArmProperties>> {
    let mut all = Vec::new();
    for trained in finals.iter().filter(|t| t.run.seed == plan.sweep_seed) {
        let arm = trained.run.arm;
        if !(arm.is_rotary() || arm == PositionKind::Absolute) {
            continue;
        }
        let config = model_of(model, arm);
        let weights = candle_core::safetensors::load(
            trained.dir.join("best").join("model.safetensors"),
            &Device::Cpu,
        )
        .with_context(|| format!("reading the weights of {}", trained.run.name()))?;
        let mut grids = Vec::new();
        for &side in &plan.property_sides {
            let grid = PatchGrid::of_image(side, side, config.patch_size)?;
            if arm == PositionKind::Absolute {
                if grid == config.config_grid() {
                    grids.push(GridProperties {
                        side,
                        coordinates: Coordinates::Indices,
                        relativity_error: absolute_relativity(&config, &weights, grid)?,
                        rotations: None,
                    });
                }
                continue;
            }
            let ropes = head_ropes(&config, &weights)?;
            for coordinates in conventions(arm) {
                let positions = placed(&config, grid, coordinates)?;
                grids.push(GridProperties {
                    side,
                    coordinates,
                    relativity_error: rotary_relativity(&ropes, &positions, grid)?,
                    rotations: Some(rotations(&ropes, &positions, grid)),
                });
            }
        }
        all.push(ArmProperties {
            arm,
            run: trained.run.name(),
            grids,
        });
    }
    Ok(all)
}

/// The patches' positions (no prefix tokens) over `grid` read with `coordinates`.
fn placed(
    config: &VisionConfig,
    grid: PatchGrid,
    coordinates: Coordinates,
) -> anyhow::Result<rotary::NdPositions> {
    let placement = Placement {
        coordinates,
        config_grid: config.config_grid(),
    };
    Ok(match config.position {
        PositionKind::RopeFlat => flat_positions(grid, 0, placement)?,
        _ => grid_positions(grid, 0, placement)?,
    })
}

/// Each layer's heads' rotations: the config's fixed one for every head of every layer, or
/// RoPE-Mixed's learned `rope_freqs` `[heads, 2, d/2]` of each layer.
fn head_ropes(
    config: &VisionConfig,
    weights: &HashMap<String, Tensor>,
) -> anyhow::Result<Vec<NdRope>> {
    let (heads, d) = (config.num_attention_heads, config.head_dim());
    if let Some(rope) = fixed_rope(config)? {
        return Ok(vec![rope; config.num_hidden_layers * heads]);
    }
    let mut ropes = Vec::new();
    for layer in 0..config.num_hidden_layers {
        let name = format!("dinov3_vit.layer.{layer}.attention.rope_freqs");
        let freqs = weights.get(&name).with_context(|| format!("no {name}"))?;
        let freqs = freqs.to_dtype(candle_core::DType::F64)?.to_vec3::<f64>()?;
        for head in freqs.iter().take(heads) {
            let [y, x] = head.as_slice() else {
                bail!("{name}: not [heads, 2, pairs]");
            };
            let omega = y.iter().zip(x).flat_map(|(&a, &b)| [a, b]).collect();
            ropes.push(NdRope::new(d, Layout::Half, 2, omega)?);
        }
    }
    Ok(ropes)
}

/// The (row, col) of each patch of `grid`, row-major.
fn cells(grid: PatchGrid) -> Vec<(usize, usize)> {
    (0..grid.rows)
        .flat_map(|r| (0..grid.cols).map(move |c| (r, c)))
        .collect()
}

/// The largest share of the score range that the pairs of one offset spread over, for
/// `scores[i][j]` over the patches of `grid`.
fn offset_spread(scores: &[Vec<f64>], grid: PatchGrid) -> f64 {
    let at = cells(grid);
    let mut by_offset: BTreeMap<(i64, i64), (f64, f64)> = BTreeMap::new();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for (i, &(ri, ci)) in at.iter().enumerate() {
        for (j, &(rj, cj)) in at.iter().enumerate() {
            let s = scores[i][j];
            let key = (rj as i64 - ri as i64, cj as i64 - ci as i64);
            let range = by_offset.entry(key).or_insert((s, s));
            *range = (range.0.min(s), range.1.max(s));
            (lo, hi) = (lo.min(s), hi.max(s));
        }
    }
    let widest = by_offset.values().map(|(a, b)| b - a).fold(0.0, f64::max);
    widest / (hi - lo).max(f64::MIN_POSITIVE)
}

/// Seeded standard normal values (Box-Muller over a splitmix64 stream).
fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    let mut uniform = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (uniform().max(f64::MIN_POSITIVE), uniform());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

/// `v` rotated by `rope` at every row of `positions`: `[rows][d]`.
fn rotated(
    rope: &NdRope,
    v: &[f32],
    positions: &rotary::NdPositions,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let (t, d) = (positions.rows(), v.len());
    let src: Vec<f32> = v.iter().copied().cycle().take(t * d).collect();
    let mut dst = vec![0.0f32; t * d];
    let shape = Shape::head_major(1, 1, t, d);
    rope.apply(&src, &mut dst, shape, positions, Direction::Forward)?;
    Ok(dst.chunks(d).map(<[f32]>::to_vec).collect())
}

/// The rotary arms' relativity error: the largest over heads of [`offset_spread`] of
/// `(R(p) q)^T (R(p') k)`.
fn rotary_relativity(
    ropes: &[NdRope],
    positions: &rotary::NdPositions,
    grid: PatchGrid,
) -> anyhow::Result<f64> {
    let mut worst = 0.0f64;
    for (h, rope) in ropes.iter().enumerate() {
        let d = rope.head_dim();
        let q = rotated(rope, &gaussian(d, PROBE_SEED + 2 * h as u64), positions)?;
        let k = rotated(rope, &gaussian(d, PROBE_SEED + 2 * h as u64 + 1), positions)?;
        let scores: Vec<Vec<f64>> = q
            .iter()
            .map(|qi| k.iter().map(|kj| dot(qi, kj)).collect())
            .collect();
        worst = worst.max(offset_spread(&scores, grid));
    }
    Ok(worst)
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

/// The `absolute` arm's relativity error: [`offset_spread`] of its first layer's
/// position-only scores, the largest over heads.
fn absolute_relativity(
    config: &VisionConfig,
    weights: &HashMap<String, Tensor>,
    grid: PatchGrid,
) -> anyhow::Result<f64> {
    let get = |name: &str| -> anyhow::Result<Tensor> {
        let full = format!("dinov3_vit.{name}");
        let t = weights.get(&full).with_context(|| format!("no {full}"))?;
        Ok(t.to_dtype(candle_core::DType::F32)?)
    };
    let table = get("embeddings.position_embeddings")?.squeeze(0)?; // [n, h]
    let normed = candle_nn::ops::layer_norm(
        &table,
        &get("layer.0.norm1.weight")?,
        &get("layer.0.norm1.bias")?,
        config.layer_norm_eps as f32,
    )?;
    let project = |name: &str| -> anyhow::Result<Tensor> {
        let w = get(&format!("layer.0.attention.{name}.weight"))?;
        let y = normed.matmul(&w.t()?)?;
        Ok(match get(&format!("layer.0.attention.{name}.bias")) {
            Ok(b) => y.broadcast_add(&b)?,
            Err(_) => y,
        })
    };
    let (q, k) = (project("q_proj")?, project("k_proj")?);
    let d = config.head_dim();
    let mut worst = 0.0f64;
    for h in 0..config.num_attention_heads {
        let qh = q.narrow(1, h * d, d)?;
        let kh = k.narrow(1, h * d, d)?;
        let scores = qh.matmul(&kh.t()?)?.to_dtype(candle_core::DType::F64)?;
        worst = worst.max(offset_spread(&scores.to_vec2::<f64>()?, grid));
    }
    Ok(worst)
}

/// Separation, weakest head, recovered share and neighbour ratio of `ropes` over `grid`.
fn rotations(ropes: &[NdRope], positions: &rotary::NdPositions, grid: PatchGrid) -> RotationStats {
    let t = positions.rows();
    // Per head, the angle of every pair at every patch.
    let angles: Vec<Vec<Vec<f64>>> = ropes
        .iter()
        .map(|rope| {
            (0..t)
                .map(|p| {
                    let at = positions.row(p).unwrap_or(&[]);
                    (0..rope.pairs()).map(|i| rope.angle(at, i)).collect()
                })
                .collect()
        })
        .collect();
    // Squared chord summed over pairs, and the pair count, per head, between patches a, b.
    let chord = |head: &Vec<Vec<f64>>, a: usize, b: usize| -> f64 {
        let sum: f64 = (head[a].iter().zip(&head[b]))
            .map(|(x, y)| 2.0 - 2.0 * (x - y).cos())
            .sum();
        sum.max(0.0)
    };
    let pairs_of = |head: &Vec<Vec<f64>>| head.first().map_or(1, Vec::len).max(1) as f64;
    let whole = |a: usize, b: usize| -> f64 {
        let total: f64 = angles.iter().map(|h| chord(h, a, b)).sum();
        let pairs: f64 = angles.iter().map(pairs_of).sum();
        (total / pairs).sqrt()
    };
    let mut separation = f64::INFINITY;
    let mut unique = 0usize;
    for a in 0..t {
        let nearest = (0..t)
            .filter(|&b| b != a)
            .map(|b| whole(a, b))
            .fold(f64::INFINITY, f64::min);
        separation = separation.min(nearest);
        unique += usize::from(nearest > SAME);
    }
    let weakest_head = angles
        .iter()
        .map(|h| {
            let mut s = f64::INFINITY;
            for a in 0..t {
                for b in (a + 1)..t {
                    s = s.min((chord(h, a, b) / pairs_of(h)).sqrt());
                }
            }
            s
        })
        .fold(f64::INFINITY, f64::min);
    let mut ratios = Vec::new();
    for (r, c) in cells(grid) {
        if r + 1 < grid.rows && c + 1 < grid.cols {
            let p = r * grid.cols + c;
            let (below, right) = (whole(p, p + grid.cols), whole(p, p + 1));
            if right > SAME {
                ratios.push(below / right);
            }
        }
    }
    RotationStats {
        separation,
        weakest_head,
        recovered: unique as f64 / t.max(1) as f64,
        neighbour_ratio: (!ratios.is_empty())
            .then(|| ratios.iter().sum::<f64>() / ratios.len() as f64),
    }
}
