//! RoPE inside your own candle model: attention weights whose queries and keys go through
//! `rotary::candle::apply_rope` (or `rotary::candle::rope`, the drop-in for
//! `candle_nn::rotary_emb::rope`, when the model makes its own cos/sin). Moving every position
//! by the same offset leaves the weights unchanged: they see only `n - m`.
//!
//! `cargo run -p rotary --features candle --example candle_attention`

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{linear_no_bias, ops::softmax_last_dim, Linear, VarBuilder, VarMap};
use rotary::candle::apply_rope;
use rotary::{Layout, Order, Positions, Rope};

/// One head's attention weights `[1, 1, t, t]` of `x` `[1, t, d]`, tokens at `offset..`.
fn weights(x: &Tensor, (q, k): (&Linear, &Linear), rope: &Rope, offset: usize) -> Result<Tensor> {
    let at = Positions::Range { offset };
    let rotated =
        |proj: &Linear| apply_rope(&proj.forward(x)?.unsqueeze(1)?, rope, at, Order::HeadMajor);
    let (q, k) = (rotated(q)?, rotated(k)?); // [1, 1, t, d]: one head, head-major
    let scale = (rope.head_dim() as f64).sqrt();
    softmax_last_dim(&(q.matmul(&k.t()?)? / scale)?)
}

fn main() -> Result<()> {
    let (dev, d) = (Device::Cpu, 64);
    let vars = VarMap::new();
    let vb = VarBuilder::from_varmap(&vars, DType::F32, &dev);
    let (q, k) = (
        linear_no_bias(d, d, vb.pp("q"))?,
        linear_no_bias(d, d, vb.pp("k"))?,
    );
    let rope = Rope::new(d, d, 10_000.0, Layout::Interleaved).map_err(candle_core::Error::wrap)?;
    let x = Tensor::randn(0f32, 1.0, (1, 6, d), &dev)?;
    let at_start = weights(&x, (&q, &k), &rope, 0)?;
    let moved = weights(&x, (&q, &k), &rope, 1000)?;
    let diff = (&at_start - &moved)?.abs()?.max_all()?.to_scalar::<f32>()?;
    let row = at_start.get(0)?.get(0)?.get(0)?.to_vec1::<f32>()?;
    println!("token 0 attends with {row:.3?}");
    println!("largest change when every position moves by 1000: {diff:.1e}");
    assert!(diff < 1e-4, "RoPE's scores depend on n - m only");
    Ok(())
}
