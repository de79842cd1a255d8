//! RoPE inside your own candle model: a self-attention block whose queries and keys go
//! through `rotary::candle::apply_rope` (`rotary::candle::rope` is the drop-in for
//! `candle_nn::rotary_emb::rope` when the model makes its own cos/sin). Shifting every position
//! by the same offset leaves the attention weights unchanged: they see only `n - m`.
//!
//! `cargo run -p rotary --features candle --example candle_attention`

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{linear_no_bias, ops::softmax_last_dim, Linear, VarBuilder, VarMap};
use rotary::candle::apply_rope;
use rotary::{Layout, Order, Positions, Rope};

/// Single-head self-attention with rotary positions.
struct Attention {
    q: Linear,
    k: Linear,
    rope: Rope,
}

impl Attention {
    fn new(vb: VarBuilder, dim: usize) -> candle_core::Result<Self> {
        let rope =
            Rope::new(dim, dim, 10_000.0, Layout::Interleaved).map_err(candle_core::Error::wrap)?;
        let (q, k) = (
            linear_no_bias(dim, dim, vb.pp("q"))?,
            linear_no_bias(dim, dim, vb.pp("k"))?,
        );
        Ok(Self { q, k, rope })
    }

    /// The attention weights of `x` `[1, t, dim]` with its tokens at `offset..offset + t`.
    fn weights(&self, x: &Tensor, offset: usize) -> candle_core::Result<Tensor> {
        let at = Positions::Range { offset };
        // [1, t, dim] -> [1, 1, t, dim]: one head, head-major.
        let q = apply_rope(
            &self.q.forward(x)?.unsqueeze(1)?,
            &self.rope,
            at,
            Order::HeadMajor,
        )?;
        let k = apply_rope(
            &self.k.forward(x)?.unsqueeze(1)?,
            &self.rope,
            at,
            Order::HeadMajor,
        )?;
        let scale = (x.dim(D::Minus1)? as f64).sqrt();
        softmax_last_dim(&(q.matmul(&k.t()?)? / scale)?) // [1, 1, t, t]
    }
}

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let vars = VarMap::new();
    let attention = Attention::new(VarBuilder::from_varmap(&vars, DType::F32, &dev), 64)?;
    let x = Tensor::randn(0f32, 1.0, (1, 6, 64), &dev)?;
    let at_start = attention.weights(&x, 0)?;
    let shifted = attention.weights(&x, 1000)?;
    let diff = (&at_start - &shifted)?
        .abs()?
        .max_all()?
        .to_scalar::<f32>()?;
    println!(
        "attention weights of token 0: {}",
        at_start.get(0)?.get(0)?.get(0)?
    );
    println!("largest change when every position moves by 1000: {diff:.1e}");
    assert!(diff < 1e-4, "RoPE's scores depend on n - m only");
    Ok(())
}
