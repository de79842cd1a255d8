//! A byte buffer aligned to 8 bytes.

/// A byte buffer aligned to 8 bytes (backed by `u64`s).
#[derive(Debug, Clone)]
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// `len` zero bytes.
    pub(crate) fn zeroed(len: usize) -> AlignedBytes {
        AlignedBytes {
            words: vec![0u64; len.div_ceil(8)],
            len,
        }
    }

    /// A copy of `bytes`.
    pub fn copy(bytes: &[u8]) -> AlignedBytes {
        let mut out = AlignedBytes::zeroed(bytes.len());
        out.as_mut_slice().copy_from_slice(bytes);
        out
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the words own at least `len` initialised bytes, and u8 has no alignment.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`; the borrow of `self` is exclusive, and every bit pattern is a
        // valid u64, so writing bytes through the view keeps the words valid.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}
