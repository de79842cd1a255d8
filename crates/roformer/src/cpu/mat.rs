//! Strided matrix views and product destinations.

/// A strided f32 matrix inside a slice: element `(i, j)` at `offset + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) offset: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major matrix of `cols` columns at the start of `data`.
    pub(crate) fn rows(data: &'a [f32], cols: usize) -> Mat<'a> {
        Mat {
            data,
            offset: 0,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose view.
    pub(crate) fn t(self) -> Mat<'a> {
        Mat {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Whether a `rows x cols` matrix with these strides lies inside `data`.
    pub(crate) fn fits(&self, rows: usize, cols: usize) -> bool {
        span_fits(
            self.data.len(),
            self.offset,
            (self.rs, self.cs),
            (rows, cols),
        )
    }
}

/// Whether the elements `offset + i * rs + j * cs` (`i < rows`, `j < cols`) all lie below
/// `len`, without overflow; an empty matrix always fits.
pub(crate) fn span_fits(
    len: usize,
    offset: usize,
    (rs, cs): (usize, usize),
    (rows, cols): (usize, usize),
) -> bool {
    rows == 0
        || cols == 0
        || (rows - 1)
            .checked_mul(rs)
            .and_then(|r| (cols - 1).checked_mul(cs).map(|c| (r, c)))
            .and_then(|(r, c)| offset.checked_add(r)?.checked_add(c))
            .is_some_and(|last| last < len)
}

/// An output buffer (of f32 unless said) shared by tasks that write disjoint elements of it.
pub(crate) struct SharedOut<T = f32> {
    ptr: *mut T,
    len: usize,
}

impl<T> Clone for SharedOut<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SharedOut<T> {}

// SAFETY: the tasks that share one write disjoint elements (each caller says which), and the
// buffer outlives them.
unsafe impl<T: Send> Send for SharedOut<T> {}
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    /// Shares `buf` (which must outlive every use, and whose writers must not overlap).
    pub(crate) fn new(buf: &mut [T]) -> SharedOut<T> {
        SharedOut {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        }
    }

    /// Shares `buf`, not yet initialised (which must outlive every use): for writers through
    /// the raw pointer alone ([`SharedOut::raw`], a product's destination), never
    /// [`SharedOut::slice`] before every element is written.
    pub(crate) fn uninit(buf: &mut [std::mem::MaybeUninit<T>]) -> SharedOut<T> {
        SharedOut {
            ptr: buf.as_mut_ptr().cast(),
            len: buf.len(),
        }
    }

    /// Elements `start..start + len`.
    ///
    /// # Safety
    /// No other live slice may overlap these elements.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start.checked_add(len).is_some_and(|end| end <= self.len),
            "shared output slice out of bounds"
        );
        std::slice::from_raw_parts_mut(self.ptr.add(start), len)
    }

    /// The base pointer and length.
    pub(crate) fn raw(&self) -> (*mut T, usize) {
        (self.ptr, self.len)
    }
}

/// Where a product goes: element `(i, j)` at `offset + i * rs + j` of the buffer.
pub(crate) enum Dst<'a> {
    /// An exclusive slice.
    Slice(&'a mut [f32]),
    /// A shared buffer whose caller writes only this product's elements.
    Shared(SharedOut),
}

impl Dst<'_> {
    /// The base pointer and length.
    pub(crate) fn raw(&mut self) -> (*mut f32, usize) {
        match self {
            Dst::Slice(s) => (s.as_mut_ptr(), s.len()),
            Dst::Shared(s) => s.raw(),
        }
    }
}
