//! Helpers shared by the tests of every crate in the workspace: the largest absolute
//! difference between two equally laid out sets of numbers (tensors, slices, tables, JSON
//! documents), and the largest magnitude, for tolerances relative to the data; and a test's
//! own temporary directory, removed when the test ends ([`Scratch`]); and the seeded generator
//! the tests draw their cases from ([`SplitMix64`]).
//!
//! A dev-dependency only; it depends on no crate of the workspace, so any of them can use it.
//!
//! ```
//! use test_support::{max_abs, max_abs_diff};
//!
//! let fast = [1.0f32, -2.0, 3.0];
//! let slow = [1.0f32, -2.0, 3.0 + 1e-6];
//! // A tolerance relative to the data's size: 1e-6 of the largest magnitude, and a margin.
//! assert!(max_abs_diff(&fast[..], &slow[..]) <= 1e-6 * max_abs(&slow[..]) + 1e-6);
//! // A NaN never passes a tolerance.
//! assert!(!(max_abs_diff(&[f32::NAN][..], &[0.0][..]) <= 1.0));
//! ```
#![warn(missing_docs)]

mod scratch;
mod splitmix;

pub use scratch::Scratch;
pub use splitmix::{mix, SplitMix64, GAMMA};

use candle_core::{DType, Tensor};
use serde_json::Value;

/// Something made of numbers that two of can be compared number by number.
pub trait Numbers {
    /// What must be equal before the numbers are compared: a tensor's dims, a table's row
    /// lengths, a JSON document with its numbers blanked (so strings and keys must match).
    type Layout: PartialEq + std::fmt::Debug;
    /// The layout of this value.
    fn layout(&self) -> Self::Layout;
    /// The numbers, widened to `f64`, in a fixed order (row-major for tensors and tables,
    /// document order for JSON).
    fn numbers(&self) -> Vec<f64>;
}

/// `max_i |a_i - b_i|` over two values of the same layout (0 for empty ones).
///
/// Equal numbers (infinities included) differ by 0; a NaN on either side makes the result NaN,
/// so no tolerance check `diff <= tol` passes on it.
///
/// # Panics
/// When the layouts differ (a test failure, with both layouts printed).
pub fn max_abs_diff<T: Numbers + ?Sized>(a: &T, b: &T) -> f64 {
    assert_eq!(a.layout(), b.layout(), "the two values differ in layout");
    a.numbers()
        .iter()
        .zip(&b.numbers())
        .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() })
        .fold(0.0, |m: f64, d| {
            if m.is_nan() || d.is_nan() {
                f64::NAN
            } else {
                m.max(d)
            }
        })
}

/// `max_i |a_i|` (0 for an empty value; NaN if any number is NaN).
pub fn max_abs<T: Numbers + ?Sized>(a: &T) -> f64 {
    a.numbers().iter().fold(0.0, |m: f64, x| {
        if m.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            m.max(x.abs())
        }
    })
}

impl Numbers for Tensor {
    type Layout = Vec<usize>;
    fn layout(&self) -> Vec<usize> {
        self.dims().to_vec()
    }
    fn numbers(&self) -> Vec<f64> {
        self.flatten_all()
            .and_then(|t| t.to_dtype(DType::F64))
            .and_then(|t| t.to_vec1())
            .expect("a tensor the test made readable as f64")
    }
}

impl Numbers for [f32] {
    type Layout = usize;
    fn layout(&self) -> usize {
        self.len()
    }
    fn numbers(&self) -> Vec<f64> {
        self.iter().map(|&x| f64::from(x)).collect()
    }
}

impl Numbers for [f64] {
    type Layout = usize;
    fn layout(&self) -> usize {
        self.len()
    }
    fn numbers(&self) -> Vec<f64> {
        self.to_vec()
    }
}

impl Numbers for [Vec<f32>] {
    type Layout = Vec<usize>;
    fn layout(&self) -> Vec<usize> {
        self.iter().map(Vec::len).collect()
    }
    fn numbers(&self) -> Vec<f64> {
        self.iter().flat_map(|row| row.numbers()).collect()
    }
}

impl<T> Numbers for Vec<T>
where
    [T]: Numbers,
{
    type Layout = <[T] as Numbers>::Layout;
    fn layout(&self) -> Self::Layout {
        self.as_slice().layout()
    }
    fn numbers(&self) -> Vec<f64> {
        self.as_slice().numbers()
    }
}

impl Numbers for Value {
    type Layout = Value;
    fn layout(&self) -> Value {
        match self {
            Value::Number(_) => Value::from(0),
            Value::Array(items) => Value::Array(items.iter().map(Value::layout).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), v.layout())).collect())
            }
            other => other.clone(),
        }
    }
    fn numbers(&self) -> Vec<f64> {
        let mut out = Vec::new();
        collect_numbers(self, &mut out);
        out
    }
}

fn collect_numbers(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Number(n) => out.push(n.as_f64().unwrap_or(f64::NAN)),
        Value::Array(items) => items.iter().for_each(|x| collect_numbers(x, out)),
        Value::Object(map) => map.values().for_each(|x| collect_numbers(x, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn the_largest_difference_is_found_and_nan_is_never_within_tolerance() {
        assert_eq!(
            max_abs_diff(&[1.0f32, 2.0, 3.0][..], &[1.0, 2.5, 2.0][..]),
            1.0
        );
        assert!(max_abs_diff(&[f32::NAN, 0.0][..], &[0.0, 9.0][..]).is_nan());
        assert_eq!(
            max_abs_diff(&[f32::INFINITY][..], &[f32::INFINITY][..]),
            0.0
        );
        assert_eq!(max_abs(&[-4.0f64, 3.0][..]), 4.0);
    }

    #[test]
    fn tensors_tables_and_json_compare_by_layout_then_numbers() {
        let a = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &Device::Cpu).unwrap();
        let b = Tensor::new(&[[1f32, 2.0], [3.0, 4.25]], &Device::Cpu).unwrap();
        assert_eq!(max_abs_diff(&a, &b), 0.25);
        let t = [vec![1f32], vec![2.0, 3.0]];
        assert_eq!(max_abs_diff(&t[..], &[vec![1.0], vec![2.0, 3.5]][..]), 0.5);
        let x = serde_json::json!({"token": "a", "score": [0.5, 1.0]});
        let y = serde_json::json!({"token": "a", "score": [0.5, 1.125]});
        assert_eq!(max_abs_diff(&x, &y), 0.125);
    }

    #[test]
    #[should_panic(expected = "differ in layout")]
    fn different_layouts_fail_the_test() {
        let x = serde_json::json!({"token": "a"});
        let y = serde_json::json!({"token": "b"});
        max_abs_diff(&x, &y);
    }
}
