//! A checkpoint's tensor converted to the model's dtype, refusing values the conversion turns
//! into infinities (the scan is [`rotary::finite`]'s).

use candle_core::{DType, Tensor};
use rotary::finite::first_non_finite_in;

/// `t` (checked finite when it is a float tensor) in `dtype`, refusing values the conversion
/// turns into infinities (e.g. 1e5 as `f16`).
///
/// # Errors
/// A message naming the first such value and its flat index, or candle's conversion error.
pub(crate) fn to_dtype_finite(t: &Tensor, dtype: DType) -> Result<Tensor, String> {
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    let converted = t.to_dtype(dtype).map_err(|e| e.to_string())?;
    let Some(bad) = first_non_finite_in(&converted).map_err(|e| e.to_string())? else {
        return Ok(converted);
    };
    let index = bad.index;
    let value = t
        .flatten_all()
        .and_then(|flat| flat.get(index)?.to_dtype(DType::F64)?.to_scalar::<f64>())
        .map_err(|e| e.to_string())?;
    Err(format!(
        "value {value} at flat index {index} does not fit in {dtype:?}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_that_overflow_are_refused() {
        let dev = candle_core::Device::Cpu;
        let t = Tensor::new(&[1f32, 65504.0, 1e5], &dev).unwrap();
        let err = to_dtype_finite(&t, DType::F16).unwrap_err();
        assert!(err.contains("100000") && err.contains("index 2"), "{err}");
        assert!(to_dtype_finite(&t, DType::BF16).is_ok());
        let fits = Tensor::new(&[1f32, 65504.0], &dev).unwrap();
        assert!(to_dtype_finite(&fits, DType::F16).is_ok());
    }
}
