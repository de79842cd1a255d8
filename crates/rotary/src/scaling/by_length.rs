//! [`ScaledRope`]: the table of every pass under a schedule whose frequencies may follow the
//! pass's length.
//!
//! Dynamic NTK and LongRoPE read the length `n` of a pass (its largest position + 1):
//! dynamic NTK's base is `base (s n / L - (s - 1))^(d / (d - 2))` once `n > L`, LongRoPE takes
//! its long factors once `n > L_orig` (the module table of [`crate::scaling`]). Up to that
//! length the caller's own table serves; past it, the schedule's table at `n` is built once
//! and kept, so that a stream of passes of a few lengths builds each once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::layout::Layout;
use crate::positions::Positions;
use crate::rope::Rope;

use super::RopeSpec;

/// Tables kept at once past the length (one per pass length); past this the store starts
/// afresh, so that its size stays bounded whatever lengths come.
pub const MAX_KEPT_LENGTHS: usize = 32;

/// The rotary table of every pass: one [`Rope`] up to a length, and past it the table of a
/// [`RopeSpec`] at the pass's length (built once per length, [`MAX_KEPT_LENGTHS`] kept).
#[derive(Debug)]
pub struct ScaledRope {
    /// The table of passes up to `past.up_to` positions (of every pass without `past`).
    rope: Arc<Rope>,
    /// The schedule of longer passes, if the table follows the length.
    past: Option<PastLength>,
}

/// A schedule's tables past a length.
#[derive(Debug)]
struct PastLength {
    /// The schedule, built at the pass's length.
    spec: RopeSpec,
    /// The pair layout of its tables.
    layout: Layout,
    /// The longest pass (in positions) that the fixed table serves.
    up_to: usize,
    /// The tables built, by pass length.
    kept: Mutex<BTreeMap<usize, Arc<Rope>>>,
}

impl ScaledRope {
    /// `rope` for every pass.
    pub fn fixed(rope: Rope) -> ScaledRope {
        ScaledRope {
            rope: Arc::new(rope),
            past: None,
        }
    }

    /// `rope` for passes of up to `up_to` positions; for a longer pass of `n` positions,
    /// `spec`'s table at `n` (`spec.rope(layout, Some(n))`). For dynamic NTK `up_to` is
    /// `max_position_embeddings`, for LongRoPE `original_max_position_embeddings`.
    pub fn by_length(rope: Rope, spec: RopeSpec, layout: Layout, up_to: usize) -> ScaledRope {
        ScaledRope {
            rope: Arc::new(rope),
            past: Some(PastLength {
                spec,
                layout,
                up_to,
                kept: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// The table of passes up to the length (of every pass for [`ScaledRope::fixed`]).
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// The table of a pass whose largest position is `end - 1`: [`ScaledRope::rope`], or past
    /// the length the schedule's table at `end` (built once, then kept).
    ///
    /// # Errors
    /// The errors of [`RopeSpec::rope`] (frequencies at `end` that are not finite).
    pub fn at_length(&self, end: usize) -> Result<Arc<Rope>> {
        let past = match &self.past {
            Some(past) if end > past.up_to => past,
            _ => return Ok(Arc::clone(&self.rope)),
        };
        let mut kept = match past.kept.lock() {
            Ok(k) => k,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(rope) = kept.get(&end) {
            return Ok(Arc::clone(rope));
        }
        if kept.len() >= MAX_KEPT_LENGTHS {
            kept.clear();
        }
        let rope = Arc::new(past.spec.rope(past.layout, Some(end))?);
        kept.insert(end, Arc::clone(&rope));
        Ok(rope)
    }

    /// The table of a `batch x seq` pass at `positions`: [`ScaledRope::at_length`] at its
    /// largest position + 1 (of the largest rounded down, for fractional positions).
    ///
    /// # Errors
    /// The errors of [`Positions::rows`] and [`ScaledRope::at_length`].
    pub fn for_pass(
        &self,
        positions: Positions<'_>,
        batch: usize,
        seq: usize,
    ) -> Result<Arc<Rope>> {
        if self.past.is_none() {
            return Ok(Arc::clone(&self.rope));
        }
        let rows = positions.rows(batch, seq)?;
        self.at_length(end_of(positions, rows))
    }
}

/// The largest position + 1 of `rows` positions (for fractional ones, of the largest rounded
/// down; 0 for none).
fn end_of(positions: Positions<'_>, rows: usize) -> usize {
    positions.integer_end(rows).unwrap_or_else(|| {
        let largest = (0..rows)
            .map(|r| positions.get(r))
            .fold(f64::NEG_INFINITY, f64::max);
        if largest >= 0.0 {
            (largest.floor() as usize).saturating_add(1)
        } else {
            0
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::Scaling;

    /// Dynamic NTK at factor 2 over 8 positions, head dim 8.
    fn dynamic() -> (RopeSpec, ScaledRope) {
        let spec = RopeSpec {
            head_dim: 8,
            dim: 8,
            base: 10_000.0,
            scaling: Scaling::Dynamic {
                factor: 2.0,
                max_position_embeddings: 8.0,
            },
        };
        let own = Rope::new(8, 8, 10_000.0, Layout::Interleaved).unwrap();
        let table = ScaledRope::by_length(own, spec.clone(), Layout::Interleaved, 8);
        (spec, table)
    }

    #[test]
    fn up_to_the_length_the_own_table_serves_and_past_it_the_schedule_at_the_pass_length() {
        let (spec, table) = dynamic();
        let own = table.rope().inv_freq().to_vec();
        for end in [0, 1, 8] {
            assert_eq!(table.at_length(end).unwrap().inv_freq(), &own[..], "{end}");
        }
        for end in [9, 12, 40] {
            let want = spec.freqs(Some(end)).unwrap().inv_freq;
            assert_eq!(table.at_length(end).unwrap().inv_freq(), &want[..], "{end}");
            assert_ne!(want, own, "{end}: a longer pass has other frequencies");
        }
        // A pass's length is its largest position + 1, of the largest rounded down.
        let at = |p: Positions<'_>, b, s| table.for_pass(p, b, s).unwrap().inv_freq().to_vec();
        assert_eq!(at(Positions::Range { offset: 4 }, 1, 4), own);
        let nine = spec.freqs(Some(9)).unwrap().inv_freq;
        assert_eq!(at(Positions::Range { offset: 5 }, 1, 4), nine);
        assert_eq!(at(Positions::Fractional(&[0.5, 8.75]), 1, 2), nine);
        assert_eq!(at(Positions::Fractional(&[-3.0, 7.9]), 1, 2), own);
    }

    #[test]
    fn a_length_is_built_once_and_the_store_stays_bounded() {
        let (_, table) = dynamic();
        let first = table.at_length(20).unwrap();
        assert!(Arc::ptr_eq(&first, &table.at_length(20).unwrap()));
        for end in 100..100 + 2 * MAX_KEPT_LENGTHS {
            table.at_length(end).unwrap();
            let kept = table.past.as_ref().unwrap().kept.lock().unwrap().len();
            assert!((1..=MAX_KEPT_LENGTHS).contains(&kept), "{kept}");
        }
        let fixed = ScaledRope::fixed(Rope::new(8, 8, 10_000.0, Layout::Interleaved).unwrap());
        let long = fixed
            .for_pass(Positions::Range { offset: 1 << 20 }, 1, 2)
            .unwrap();
        assert!(std::ptr::eq(Arc::as_ptr(&long), fixed.rope()));
    }
}
