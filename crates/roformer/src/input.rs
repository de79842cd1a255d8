//! Checking model inputs against the config and each other before anything runs, and the
//! additive attention mask.

use candle_core::{DType, Device, Tensor};

use crate::config::RoFormerConfig;
use crate::error::{ModelError, Result};

/// Inputs that passed [`validate`]: `u32` ids on the model's device and the positions of the
/// tokens.
#[derive(Debug)]
pub(crate) struct Batch {
    /// Token ids, `[batch, seq]`, `u32`.
    pub input_ids: Tensor,
    /// Token type ids, `[batch, seq]`, `u32`; `None` means all zero.
    pub token_type_ids: Option<Tensor>,
    /// The 0/1 attention mask, `[batch, seq]`, as f32 values; `None` means all ones.
    pub attention_mask: Option<Vec<f32>>,
    /// One position per token, sequence-major (`batch * seq`); `None` means `0..seq`.
    pub positions: Option<Vec<u32>>,
    /// Number of sequences.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
}

fn input_error(msg: String) -> ModelError {
    ModelError::Input(msg)
}

/// The values of an integer tensor as i64, rejecting float tensors.
fn integers(what: &str, t: &Tensor) -> Result<Vec<i64>> {
    match t.dtype() {
        DType::U8 | DType::U32 | DType::I64 => {
            Ok(t.to_dtype(DType::I64)?.flatten_all()?.to_vec1::<i64>()?)
        }
        other => Err(input_error(format!(
            "{what} must hold integers (u8, u32 or i64), got {other:?}"
        ))),
    }
}

/// Checks that `t` has the shape of `input_ids`.
fn same_shape(what: &str, t: &Tensor, batch: usize, seq: usize) -> Result<()> {
    if t.dims() != [batch, seq] {
        return Err(input_error(format!(
            "{what} has shape {:?}, but input_ids has [{batch}, {seq}]",
            t.dims()
        )));
    }
    Ok(())
}

/// Checks every id is in `0..limit`, naming the first that is not.
fn check_range(
    what: &str,
    values: &[i64],
    seq: usize,
    limit: usize,
    limit_name: &str,
) -> Result<()> {
    let bad = values
        .iter()
        .position(|&v| v < 0 || v as u64 >= limit as u64);
    if let Some(i) = bad {
        return Err(input_error(format!(
            "{what}[{}][{}] = {} is out of range: {limit_name} is {limit}",
            i / seq,
            i % seq,
            values[i]
        )));
    }
    Ok(())
}

fn to_u32_tensor(values: &[i64], batch: usize, seq: usize, device: &Device) -> Result<Tensor> {
    let v: Vec<u32> = values.iter().map(|&x| x as u32).collect();
    Ok(Tensor::from_vec(v, (batch, seq), device)?)
}

/// Validates the inputs of a forward pass:
/// - `input_ids`: `[batch, seq]` integers in `0..vocab_size`, batch and seq at least 1;
/// - `token_type_ids`: same shape, integers in `0..type_vocab_size`;
/// - `attention_mask`: same shape, every value 0 (masked) or 1 (attended);
/// - `position_ids`: same shape, integers in `0..2^32`.
///
/// # Errors
/// [`ModelError::Input`] naming the offending tensor (and element).
pub(crate) fn validate(
    cfg: &RoFormerConfig,
    device: &Device,
    input_ids: &Tensor,
    token_type_ids: Option<&Tensor>,
    attention_mask: Option<&Tensor>,
    position_ids: Option<&Tensor>,
) -> Result<Batch> {
    let (batch, seq) = match *input_ids.dims() {
        [b, s] if b > 0 && s > 0 => (b, s),
        _ => {
            return Err(input_error(format!(
                "input_ids must be [batch, seq] with batch, seq >= 1, got shape {:?}",
                input_ids.dims()
            )))
        }
    };
    let ids = integers("input_ids", input_ids)?;
    check_range("input_ids", &ids, seq, cfg.vocab_size, "vocab_size")?;
    let input_ids = to_u32_tensor(&ids, batch, seq, device)?;

    let token_type_ids = match token_type_ids {
        None => None,
        Some(t) => {
            same_shape("token_type_ids", t, batch, seq)?;
            let v = integers("token_type_ids", t)?;
            check_range(
                "token_type_ids",
                &v,
                seq,
                cfg.type_vocab_size,
                "type_vocab_size",
            )?;
            Some(to_u32_tensor(&v, batch, seq, device)?)
        }
    };

    let attention_mask = match attention_mask {
        None => None,
        Some(m) => {
            same_shape("attention_mask", m, batch, seq)?;
            let v = m.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            if let Some(i) = v.iter().position(|&x| x != 0.0 && x != 1.0) {
                return Err(input_error(format!(
                    "attention_mask[{}][{}] = {} is neither 0 nor 1",
                    i / seq,
                    i % seq,
                    v[i]
                )));
            }
            Some(v)
        }
    };

    let positions = match position_ids {
        None => None,
        Some(p) => {
            same_shape("position_ids", p, batch, seq)?;
            let v = integers("position_ids", p)?;
            check_range("position_ids", &v, seq, 1 << 32, "the position limit")?;
            Some(v.iter().map(|&x| x as u32).collect())
        }
    };

    Ok(Batch {
        input_ids,
        token_type_ids,
        attention_mask,
        positions,
        batch,
        seq,
    })
}

/// The most negative finite value of `dtype`: what a masked score gets added (as transformers'
/// eager attention does), so that a fully masked row attends uniformly instead of giving NaN.
pub(crate) fn mask_value(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => f64::from(half::f16::MIN),
        DType::BF16 => f64::from(half::bf16::MIN),
        DType::F64 => f64::MIN,
        _ => f64::from(f32::MIN),
    }
}

/// The additive attention mask: 0 where query `i` may attend key `j`, the dtype's lowest value
/// where it may not. Keys are masked where `attention_mask` is 0; a decoder also masks `j > i`.
/// Shape `[batch, 1, 1, seq]` (padding only) or `[batch, 1, seq, seq]` (causal); `None` when
/// nothing is masked.
///
/// # Errors
/// Candle errors only.
pub(crate) fn additive_mask(
    batch: &Batch,
    causal: bool,
    dtype: DType,
    device: &Device,
) -> Result<Option<Tensor>> {
    let (b, t) = (batch.batch, batch.seq);
    let low = mask_value(dtype);
    let padding = match &batch.attention_mask {
        None => None,
        Some(m) => {
            let keep = Tensor::from_slice(m, (b, 1, 1, t), device)?.to_dtype(DType::F64)?;
            // (1 - keep) * low
            Some(keep.affine(-low, low)?.to_dtype(dtype)?)
        }
    };
    if !causal {
        return Ok(padding);
    }
    let future: Vec<f64> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j > i { low } else { 0.0 }))
        .collect();
    let future = Tensor::from_vec(future, (1, 1, t, t), device)?.to_dtype(dtype)?;
    Ok(Some(match padding {
        // Where both mask, take the minimum rather than the sum, which would overflow to -inf.
        Some(p) => p.broadcast_minimum(&future)?,
        None => future.broadcast_as((b, 1, t, t))?.contiguous()?,
    }))
}
