//! The limits of the analysis options: every size an option gives is checked against a
//! documented cap before anything is allocated or computed, so that a typo such as
//! `--max-distance 1099511627776` is a clear error rather than an abort or an endless run.
//!
//! Rotated dims are capped by the rotary crate ([`rotary::MAX_ROTARY_DIM`]); the caps here
//! bound memory (a cos/sin table of at most [`MAX_TABLE_ELEMENTS`], 512 MiB) and time (at most
//! [`MAX_WORK`] table elements rotated or frequency terms summed: seconds, not hours).

use anyhow::bail;

/// The largest `--max-distance` of `analyze decay`.
pub const MAX_DISTANCE: usize = 1 << 20;

/// The largest `--samples` of either analysis.
pub const MAX_SAMPLES: usize = 1 << 16;

/// The most elements (rows x rotated dims) of one cos/sin table an analysis builds.
pub const MAX_TABLE_ELEMENTS: u128 = 1 << 26;

/// The most elements all the work of one run may touch: samples x table elements, or
/// frequency pairs x distances for the bound.
pub const MAX_WORK: u128 = 1 << 30;

/// Fails unless `value <= limit`, naming the option (or product of options) in `what`.
pub fn at_most(what: &str, value: u128, limit: u128) -> anyhow::Result<()> {
    if value > limit {
        bail!("{what} = {value} is above the limit of {limit}");
    }
    Ok(())
}
