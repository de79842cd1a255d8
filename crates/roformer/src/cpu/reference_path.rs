//! A test's switch, on its own thread, from a fast training path to the slower path it is held
//! to bit for bit: a flag per path and thread that the code reads where it chooses, set only
//! inside [`with`] (a test-only function), so never set outside the tests.
//!
//! ```text
//! ReferencePath::WeightsPerProduct      each bf16 product packs its weight   (cpu::kept_weight)
//! ReferencePath::OperandsPerProduct     the attention's operands likewise    (autograd::attention)
//! ReferencePath::LinksApart             each pre-norm half its own candle op (autograd::chain)
//! ```
//!
//! The ops read the flag where they are built, which is on the calling thread.

use std::cell::Cell;

/// A slower path a fast one is tested against (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReferencePath {
    /// Each weight left as rows for every bf16 product to pack, instead of packed once a step.
    WeightsPerProduct,
    /// The training attention's operands rounded and packed by every product, instead of once
    /// a head.
    OperandsPerProduct,
    /// Each link of a chain run as an op of its own, with its own `cat` of its parameters.
    LinksApart,
}

impl ReferencePath {
    /// The path's bit in the thread's flags.
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

thread_local! {
    /// The paths this thread takes, one bit each ([`ReferencePath::bit`]).
    static TAKEN: Cell<u8> = const { Cell::new(0) };
}

/// Whether this thread takes `path`: only inside [`with`], so always `false` outside the tests.
pub(crate) fn taken(path: ReferencePath) -> bool {
    cfg!(test) && TAKEN.with(|t| t.get() & path.bit() != 0)
}

/// `f()` with this thread taking `path` (and the paths it took already), as it was before.
#[cfg(test)]
pub(crate) fn with<R>(path: ReferencePath, f: impl FnOnce() -> R) -> R {
    let before = TAKEN.with(|t| t.replace(t.get() | path.bit()));
    let out = f();
    TAKEN.with(|t| t.set(before));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_taken_inside_with_only_and_the_others_are_left_alone() {
        use ReferencePath::*;
        assert!(!taken(LinksApart));
        with(LinksApart, || {
            assert!(taken(LinksApart) && !taken(WeightsPerProduct));
            with(WeightsPerProduct, || {
                assert!(taken(LinksApart) && taken(WeightsPerProduct));
            });
            assert!(taken(LinksApart) && !taken(WeightsPerProduct));
        });
        assert!(!taken(LinksApart) && !taken(OperandsPerProduct));
        // Another thread has its own flags.
        with(OperandsPerProduct, || {
            assert!(!std::thread::spawn(|| taken(OperandsPerProduct))
                .join()
                .unwrap_or(true));
        });
    }
}
