//! What every layer adds to its attention scores: an additive mask (padding, causal) and a
//! position bias (ALiBi, T5), kept apart.
//!
//! ```text
//! S[s, h, i, j] = q_i . k_j / sqrt(d) + bias[s, h, i, j] + mask[s, h, i, j]
//! ```
//!
//! The fused training attention (`autograd::attention`) reads the two apart and gives the bias
//! its gradient at the bias's own size (`[1, heads, t, t]` for T5's table, shared by the
//! sequences). The op-by-op path adds them once, on first use, floored at the dtype's lowest
//! value so that a masked score stays finite.

use std::sync::OnceLock;

use candle_core::Tensor;

use crate::input::mask_value;

/// The additive terms of the attention scores of one pass.
#[derive(Debug)]
pub struct ScoreMask<'a> {
    /// Broadcastable to `[b, heads, t, t]`: 0 where a query may attend a key, the dtype's lowest
    /// value where it may not.
    mask: Option<&'a Tensor>,
    /// `[1 or b, heads, t, t]`, from [`crate::position_bias::PositionBias::bias`].
    bias: Option<Tensor>,
    /// `max(mask + bias, lowest)`, computed on first use.
    sum: OnceLock<Option<Tensor>>,
}

impl<'a> ScoreMask<'a> {
    /// The mask `mask` (broadcastable to `[b, heads, t, t]`) and the position bias `bias`
    /// (`[1 or b, heads, t, t]`), either absent.
    pub fn new(mask: Option<&'a Tensor>, bias: Option<Tensor>) -> Self {
        ScoreMask {
            mask,
            bias,
            sum: OnceLock::new(),
        }
    }

    /// The additive mask alone.
    pub fn mask(&self) -> Option<&Tensor> {
        self.mask
    }

    /// The position bias alone.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// `max(mask + bias, lowest)` (broadcast), or whichever of the two is present.
    ///
    /// # Errors
    /// Candle errors of the sum (dims that do not broadcast).
    pub fn sum(&self) -> candle_core::Result<Option<&Tensor>> {
        if let Some(sum) = self.sum.get() {
            return Ok(sum.as_ref());
        }
        let sum = match (self.mask, &self.bias) {
            (Some(m), Some(b)) => Some(m.broadcast_add(b)?.maximum(mask_value(b.dtype()))?),
            (Some(m), None) => Some(m.clone()),
            (None, b) => b.clone(),
        };
        Ok(self.sum.get_or_init(|| sum).as_ref())
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    #[test]
    fn the_sum_broadcasts_and_stays_finite_where_masked() {
        let mask = Tensor::new(&[[[[0f32, f32::MIN]]], [[[0.0, 0.0]]]], &Device::Cpu).unwrap();
        let bias = Tensor::new(&[[[[-1f32, -2.0]], [[-3.0, -4.0]]]], &Device::Cpu).unwrap();
        let both = ScoreMask::new(Some(&mask), Some(bias.clone()));
        let sum = both.sum().unwrap().unwrap();
        assert_eq!(sum.dims(), [2, 2, 1, 2]);
        let values: Vec<f32> = sum.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(
            values,
            [-1.0, f32::MIN, -3.0, f32::MIN, -1.0, -2.0, -3.0, -4.0]
        );
        assert!(
            std::ptr::eq(both.sum().unwrap().unwrap(), sum),
            "computed once"
        );
        let alone = ScoreMask::new(None, Some(bias.clone()));
        let values: Vec<f32> = alone
            .sum()
            .unwrap()
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(values, [-1.0, -2.0, -3.0, -4.0]);
        assert!(ScoreMask::new(None, None).sum().unwrap().is_none());
    }
}
