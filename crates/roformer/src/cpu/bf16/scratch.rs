//! Per-thread scratch buffers for the packed operands, kept between products so that packing
//! writes into memory already mapped (a fresh buffer of a few MiB costs a page fault per 4 KiB).

use std::cell::RefCell;
use std::thread::LocalKey;

thread_local! {
    /// The packed left operand.
    pub(super) static A: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    /// The packed right operand.
    pub(super) static B: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` words of this thread's buffer `key` (contents unspecified), or on a fresh
/// buffer when that one is in use (a product nested in another on this thread, as rayon may run
/// one task inside another's wait).
pub(super) fn with<R>(
    key: &'static LocalKey<RefCell<Vec<u32>>>,
    len: usize,
    f: impl FnOnce(&mut [u32]) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            f(&mut buf[..len])
        }
        Err(_) => f(&mut vec![0; len]),
    })
}
