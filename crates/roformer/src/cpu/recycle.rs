//! Large buffers handed back when a training op is done with them and taken again by the next
//! op, or the next step, that needs one of the same size: the activations a training op keeps
//! ([`super::kept::Kept`]) and the scratch rows of its backward.
//!
//! ```text
//! take(len)   a buffer of len elements, contents unspecified: one given back (the smallest
//!             whose capacity holds len, cut or grown to len), else a fresh one of zeros
//!             (none for len 0)
//! give(buf)   buf kept for a later take (at most SHELF buffers per element type: when full,
//!             in place of the smallest held, if that is smaller)
//! release()   every buffer held freed (a training run's end: a process that trains and
//!             then serves does not keep the step's peak)
//! ```
//!
//! A training step makes the same buffers in every step, so from the second step on every
//! `take` finds one: no allocation, no page faults, and above all no zeroing (under the warm
//! allocator, `vec![0; n]` on reused memory is a `memset` of every buffer, about 150 MB per
//! layer and step of the Fashion-MNIST ViT). The caller must write every element it later
//! reads: a buffer's old contents are the last user's values. Held buffers are at most what
//! the step itself had alive at its peak, which the warm allocator keeps mapped anyway.

use std::ops::Deref;
use std::sync::{Mutex, PoisonError};

/// The buffers kept at most per element type (a step of the vision model keeps about a dozen
/// per block for its backward).
const SHELF: usize = 128;

/// An element type with a shelf of its own.
pub(crate) trait Recycled: Copy + Default + Send + 'static {
    /// The buffers given back.
    fn shelf() -> &'static Mutex<Vec<Vec<Self>>>;
}

static F32: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
static U32: Mutex<Vec<Vec<u32>>> = Mutex::new(Vec::new());

impl Recycled for f32 {
    fn shelf() -> &'static Mutex<Vec<Vec<f32>>> {
        &F32
    }
}

impl Recycled for u32 {
    fn shelf() -> &'static Mutex<Vec<Vec<u32>>> {
        &U32
    }
}

/// A buffer of `len` elements whose contents are unspecified (the caller writes each element
/// before reading it): the smallest buffer given back whose capacity holds `len`, else a new
/// one.
pub(crate) fn take<T: Recycled>(len: usize) -> Vec<T> {
    take_from(T::shelf(), len)
}

/// Keeps `buf` for a later [`take`] (on a full shelf, in place of the smallest buffer held
/// when that is smaller; dropped otherwise).
pub(crate) fn give<T: Recycled>(buf: Vec<T>) {
    give_to(T::shelf(), buf);
}

/// A buffer taken from a shelf ([`take`]) that goes back to it ([`give`]) when dropped: what a
/// training op keeps for its backward (activations, packed weights and operands).
pub(crate) struct Lent<T: Recycled>(Vec<T>);

impl<T: Recycled> Lent<T> {
    /// `buf`, handed back to its shelf when dropped.
    pub(crate) fn new(buf: Vec<T>) -> Self {
        Lent(buf)
    }
}

impl<T: Recycled> Deref for Lent<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T: Recycled> Drop for Lent<T> {
    /// Hands the buffer back for the next [`take`] of its size.
    fn drop(&mut self) {
        give(std::mem::take(&mut self.0));
    }
}

/// Frees every buffer held, of every element type: called when a training run ends.
pub(crate) fn release() {
    release_from(&F32);
    release_from(&U32);
}

/// [`take`] from `shelf`.
fn take_from<T: Copy + Default>(shelf: &Mutex<Vec<Vec<T>>>, len: usize) -> Vec<T> {
    if len == 0 {
        return Vec::new();
    }
    let found = {
        let mut shelf = shelf.lock().unwrap_or_else(PoisonError::into_inner);
        let best = shelf
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        best.map(|i| shelf.swap_remove(i))
    };
    match found {
        Some(mut buf) => {
            // Within the capacity: no allocation; only a grown tail is written.
            buf.resize(len, T::default());
            buf
        }
        None => vec![T::default(); len],
    }
}

/// [`release`] of `shelf`.
fn release_from<T>(shelf: &Mutex<Vec<Vec<T>>>) {
    let held = std::mem::take(&mut *shelf.lock().unwrap_or_else(PoisonError::into_inner));
    drop(held);
}

/// [`give`] to `shelf`.
fn give_to<T>(shelf: &Mutex<Vec<Vec<T>>>, buf: Vec<T>) {
    if buf.is_empty() {
        return;
    }
    let mut shelf = shelf.lock().unwrap_or_else(PoisonError::into_inner);
    if shelf.len() < SHELF {
        shelf.push(buf);
        return;
    }
    let smallest = shelf.iter_mut().min_by_key(|b| b.capacity());
    if let Some(slot) = smallest.filter(|b| b.capacity() < buf.capacity()) {
        *slot = buf;
    }
}

/// Overwrites every buffer held with `f32::NAN` and `u32::MAX` (a pair of bf16 NaNs), so that
/// a test of a caller that reads an element it did not write sees NaN.
#[cfg(test)]
pub(crate) fn poison() {
    let lock = |s: &'static Mutex<Vec<Vec<f32>>>| s.lock().unwrap_or_else(PoisonError::into_inner);
    lock(&F32).iter_mut().for_each(|b| b.fill(f32::NAN));
    let mut words = U32.lock().unwrap_or_else(PoisonError::into_inner);
    words.iter_mut().for_each(|b| b.fill(u32::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again_at_its_size_or_less() {
        // A shelf of the test's own (the process's shelves are shared by concurrent tests).
        let shelf = Mutex::new(Vec::new());
        let mut buf = take_from::<u32>(&shelf, 105);
        assert_eq!(buf.len(), 105);
        assert!(buf.iter().all(|&w| w == 0), "a fresh buffer is zeros");
        buf.fill(7);
        let at = buf.as_ptr() as usize;
        give_to(&shelf, buf);
        // Too long for the one kept: fresh.
        let cap = shelf.lock().unwrap()[0].capacity();
        assert!(take_from::<u32>(&shelf, cap + 1).iter().all(|&w| w == 0));
        let again = take_from::<u32>(&shelf, 102);
        assert_eq!(again.len(), 102);
        assert_eq!(
            again.as_ptr() as usize,
            at,
            "the same memory, not a fresh buffer"
        );
        assert!(
            again.iter().all(|&w| w == 7),
            "contents are the last user's"
        );
        assert!(shelf.lock().unwrap().is_empty());
        // Cut short, it still serves a longer request within its capacity: the same memory,
        // the kept part stale, the grown tail written.
        give_to(&shelf, again);
        let longer = take_from::<u32>(&shelf, 105);
        assert_eq!((longer.len(), longer.as_ptr() as usize), (105, at));
        assert!(longer[..102].iter().all(|&w| w == 7));
        assert!(longer[102..].iter().all(|&w| w == 0));
        assert!(shelf.lock().unwrap().is_empty());
        give_to(&shelf, Vec::<u32>::new());
        assert!(
            shelf.lock().unwrap().is_empty(),
            "an empty buffer is not kept"
        );
        // Nothing taken for nothing asked.
        give_to(&shelf, vec![1u32; 3]);
        assert!(take_from::<u32>(&shelf, 0).is_empty());
        assert_eq!(shelf.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_full_shelf_keeps_the_largest() {
        let shelf = Mutex::new(Vec::new());
        for i in 0..SHELF {
            give_to(&shelf, vec![0u32; 10 + i]);
        }
        give_to(&shelf, vec![0u32; 5]);
        give_to(&shelf, vec![0u32; 1000]);
        let lens: Vec<usize> = shelf.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(lens.len(), SHELF);
        assert!(!lens.contains(&5) && !lens.contains(&10), "{lens:?}");
        assert!(lens.contains(&1000) && lens.contains(&11));
    }

    #[test]
    fn release_frees_every_buffer_held() {
        let shelf = Mutex::new(Vec::new());
        give_to(&shelf, vec![1u32; 10]);
        give_to(&shelf, vec![2u32; 20]);
        release_from(&shelf);
        assert!(shelf.lock().unwrap().is_empty());
        assert!(
            take_from::<u32>(&shelf, 10).iter().all(|&w| w == 0),
            "fresh"
        );
    }
}
