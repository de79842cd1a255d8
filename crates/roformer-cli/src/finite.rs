//! Finding non-finite model outputs: a checkpoint whose weights are finite can still overflow
//! f32 on some input, and a NaN or an infinity must never pass for a result.

use candle_core::{DType, Tensor};

/// The index and value of the first NaN or infinity in `values`.
pub fn first_non_finite(values: &[f32]) -> Option<(usize, f32)> {
    values
        .iter()
        .position(|v| !v.is_finite())
        .map(|i| (i, values[i]))
}

/// The first NaN or infinity of `t` (read as f32, row-major) with its index per dimension.
///
/// # Errors
/// A tensor that cannot be read as f32.
pub fn first_non_finite_in(t: &Tensor) -> candle_core::Result<Option<(Vec<usize>, f32)>> {
    let values = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    Ok(first_non_finite(&values).map(|(flat, value)| (unravel(flat, t.dims()), value)))
}

/// The per-dimension index of row-major position `flat` in a tensor of shape `dims`.
fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut index = vec![0; dims.len()];
    for (i, &d) in dims.iter().enumerate().rev() {
        if d > 0 {
            index[i] = flat % d;
            flat /= d;
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn finds_the_first_nan_or_infinity_with_its_index() {
        assert_eq!(first_non_finite(&[1.0, 2.0]), None);
        let (i, v) = first_non_finite(&[1.0, f32::INFINITY, f32::NAN]).unwrap();
        assert_eq!((i, v), (1, f32::INFINITY));
        let t = Tensor::from_vec(
            vec![0f32, 1.0, 2.0, 3.0, f32::NAN, 5.0],
            (1, 2, 3),
            &Device::Cpu,
        )
        .unwrap();
        let (index, value) = first_non_finite_in(&t).unwrap().unwrap();
        assert_eq!(index, [0, 1, 1]);
        assert!(value.is_nan());
    }
}
