//! `CosSin::from_pair_tables`: per-pair cos/sin tables (candle-nn's and Hugging Face's
//! `[rows, r/2]`) expanded into the kernels' table.

use half::{bf16, f16};
use rotary::{CosSin, Element, Layout, RopeError};

/// The angle of pair `i` of row `row`: positions times the paper's frequencies, base 10000.
fn angle(row: usize, i: usize, rotary_dim: usize) -> f64 {
    row as f64 * 10_000f64.powf(-2.0 * i as f64 / rotary_dim as f64)
}

/// cos and sin of [`angle`], `[rows, rotary_dim / 2]` row-major, rounded once to `T`.
fn pair_tables<T: Element>(rows: usize, rotary_dim: usize) -> (Vec<T>, Vec<T>) {
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for row in 0..rows {
        for i in 0..rotary_dim / 2 {
            let (s, c) = angle(row, i, rotary_dim).sin_cos();
            cos.push(T::from_f32(c as f32));
            sin.push(T::from_f32(s as f32));
        }
    }
    (cos, sin)
}

/// Given the f32 cos/sin of the same angles, the expansion is exactly the table computed from
/// the angles (which rounds each f64 cos and sin to f32 once), on both layouts, for a small
/// table and one large enough to be expanded on threads.
#[test]
fn f32_pair_tables_equal_the_table_from_angles() {
    for layout in [Layout::Interleaved, Layout::Half] {
        for (rows, r) in [(3, 2), (7, 34), (4096, 128)] {
            let (cos, sin) = pair_tables::<f32>(rows, r);
            let expanded = CosSin::from_pair_tables(layout, r, &cos, &sin).unwrap();
            let direct = CosSin::from_angles(layout, r, rows, 1.0, |row, i| angle(row, i, r));
            assert_eq!(expanded, direct.unwrap(), "{layout:?} {rows}x{r}");
        }
    }
}

/// 16-bit tables are widened exactly: the same as expanding their f32 widening.
#[test]
fn half_pair_tables_are_widened_exactly() {
    fn widened<T: Element>(layout: Layout) {
        let (rows, r) = (9, 18);
        let (cos, sin) = pair_tables::<T>(rows, r);
        let wide = |v: &[T]| v.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
        let expanded = CosSin::from_pair_tables(layout, r, &cos, &sin).unwrap();
        let from_f32 = CosSin::from_pair_tables(layout, r, &wide(&cos), &wide(&sin)).unwrap();
        assert_eq!(expanded, from_f32);
    }
    for layout in [Layout::Interleaved, Layout::Half] {
        widened::<f16>(layout);
        widened::<bf16>(layout);
    }
}

#[test]
fn malformed_pair_tables_are_errors() {
    let four = [0f32; 4];
    let three = [0f32; 3];
    let layout = Layout::Half;
    assert!(matches!(
        CosSin::from_pair_tables(layout, 3, &four, &four),
        Err(RopeError::InvalidRotaryDim(3))
    ));
    assert!(matches!(
        CosSin::from_pair_tables(layout, 0, &four, &four),
        Err(RopeError::InvalidRotaryDim(0))
    ));
    for (cos, sin, r) in [(&four[..], &three[..], 2), (&three[..], &three[..], 4)] {
        assert!(
            matches!(
                CosSin::from_pair_tables(layout, r, cos, sin),
                Err(RopeError::TableMismatch(_))
            ),
            "{} {} {r}",
            cos.len(),
            sin.len()
        );
    }
    let empty = CosSin::from_pair_tables::<f32>(layout, 4, &[], &[]).unwrap();
    assert_eq!(empty.rows(), 0);
}
