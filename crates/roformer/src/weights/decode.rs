//! From stored bytes to a contiguous tensor: any in-bounds strides (a transposed or sliced
//! tensor saved by `torch.save` included), little-endian on any host, each value checked for
//! NaN and infinities while it is still in cache.

use std::ops::Range;

use candle_core::{DType, Device, Tensor, WithDType};
use file_source::Source;
use half::{bf16, f16};
use rotary::finite::{self, NonFinite, BLOCK};

/// Bytes of a contiguous run read and decoded at a time: small next to a tensor, large
/// enough that the system calls cost little (the peak memory of a load is the model plus this).
const CHUNK_BYTES: usize = 1 << 20;

/// Where a tensor's values lie in a checkpoint's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredTensor {
    /// The stored element type.
    pub dtype: DType,
    /// The shape.
    pub shape: Vec<usize>,
    /// The stride of each dimension, in elements.
    pub strides: Vec<usize>,
    /// The element of the storage where element `[0, 0, ...]` lies.
    pub offset: usize,
    /// The storage: a byte range of the checkpoint.
    pub storage: Range<usize>,
}

/// Why a stored tensor cannot be turned into a tensor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DecodeError {
    /// A NaN or an infinity (its flat, row-major, index).
    NonFinite(NonFinite),
    /// Anything else: an unsupported dtype, a layout [`StoredTensor::check`] refuses.
    Unreadable(String),
}

/// The row-major strides of `shape`.
pub(crate) fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for i in (1..shape.len()).rev() {
        strides[i - 1] = strides[i].saturating_mul(shape[i]);
    }
    strides
}

impl StoredTensor {
    /// Checks that every element lies inside the storage and that the tensor is no larger
    /// than its storage (so that decoding it allocates no more than the file holds), with
    /// checked arithmetic throughout. Returns the end of the elements of the storage the
    /// tensor covers (one past its last element; 0 for an empty tensor).
    ///
    /// # Errors
    /// A message saying which claim does not hold.
    pub(crate) fn check(&self) -> Result<usize, String> {
        if self.shape.len() != self.strides.len() {
            return Err(format!(
                "shape {:?} and strides {:?} differ in length",
                self.shape, self.strides
            ));
        }
        let size = self.dtype.size_in_bytes();
        let capacity = self.storage.len() / size;
        let overflow = || format!("shape {:?} overflows", self.shape);
        let count = self
            .shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(overflow)?;
        if count == 0 {
            return Ok(0);
        }
        if count > capacity {
            return Err(format!(
                "shape {:?} has {count} elements, its storage holds {capacity}",
                self.shape
            ));
        }
        let last = self
            .shape
            .iter()
            .zip(&self.strides)
            .try_fold(self.offset, |at, (&d, &s)| {
                at.checked_add((d - 1).checked_mul(s)?)
            })
            .ok_or_else(overflow)?;
        if last >= capacity {
            return Err(format!(
                "shape {:?} with strides {:?} from element {} reaches element {last} of a \
                 storage of {capacity}",
                self.shape, self.strides, self.offset
            ));
        }
        Ok(last + 1)
    }

    /// Checks the tensor ([`StoredTensor::check`]) and decodes it from `source` into a
    /// contiguous tensor on the CPU in the stored dtype, refusing NaN and infinities.
    ///
    /// # Errors
    /// [`DecodeError`].
    pub(crate) fn decode(&self, source: &Source) -> Result<Tensor, DecodeError> {
        match self.dtype {
            DType::F32 => self.decode_as::<f32, 4>(source),
            DType::F64 => self.decode_as::<f64, 8>(source),
            DType::F16 => self.decode_as::<f16, 2>(source),
            DType::BF16 => self.decode_as::<bf16, 2>(source),
            DType::U8 => self.decode_as::<u8, 1>(source),
            DType::U32 => self.decode_as::<u32, 4>(source),
            DType::I16 => self.decode_as::<i16, 2>(source),
            DType::I32 => self.decode_as::<i32, 4>(source),
            DType::I64 => self.decode_as::<i64, 8>(source),
            other => Err(DecodeError::Unreadable(format!(
                "unsupported dtype {other:?}"
            ))),
        }
    }

    fn decode_as<T: Element<N>, const N: usize>(
        &self,
        source: &Source,
    ) -> Result<Tensor, DecodeError> {
        let end = self.check().map_err(DecodeError::Unreadable)?;
        // `check` proved every index below in bounds of the storage and the product exact.
        let count: usize = self.shape.iter().product();
        let mut out: Vec<T> = Vec::with_capacity(count);
        let contiguous = self
            .shape
            .iter()
            .zip(&self.strides)
            .zip(row_major(&self.shape))
            .all(|((&d, &s), r)| d == 1 || s == r);
        if count > 0 && contiguous {
            self.decode_run(source, count, &mut out)?;
        } else if count > 0 {
            self.gather(source, end, &mut out)?;
        }
        Tensor::from_vec(out, self.shape.as_slice(), &Device::Cpu)
            .map_err(|e| DecodeError::Unreadable(e.to_string()))
    }

    /// The byte range of the storage's elements `elements`.
    fn bytes_of(&self, elements: Range<usize>, size: usize) -> Range<usize> {
        self.storage.start + elements.start * size..self.storage.start + elements.end * size
    }

    /// Decodes the `count` elements from `offset` into `out`, a chunk at a time: each chunk is
    /// read into one buffer, and each block of it decoded, then scanned while it is still in
    /// L1.
    fn decode_run<T: Element<N>, const N: usize>(
        &self,
        source: &Source,
        count: usize,
        out: &mut Vec<T>,
    ) -> Result<(), DecodeError> {
        let per_chunk = (CHUNK_BYTES / N).max(1);
        let mut buffer = Vec::new();
        for from in (0..count).step_by(per_chunk) {
            let elements = self.offset + from..self.offset + count.min(from + per_chunk);
            let chunk = source
                .read(self.bytes_of(elements, N), &mut buffer)
                .map_err(|e| DecodeError::Unreadable(e.to_string()))?;
            for block in chunk.as_chunks::<N>().0.chunks(BLOCK) {
                let from = out.len();
                out.extend(block.iter().map(|&e| T::from_le(e)));
                if let Some(bad) = T::first_non_finite_stored(block) {
                    return Err(DecodeError::NonFinite(NonFinite {
                        index: from + bad.index,
                        ..bad
                    }));
                }
            }
        }
        Ok(())
    }

    /// Gathers the elements of any other strides into `out`: reads the storage's elements
    /// `offset..end` (the span the tensor covers), walks the outer indices like an odometer,
    /// gathers each row, then scans what was gathered.
    fn gather<T: Element<N>, const N: usize>(
        &self,
        source: &Source,
        end: usize,
        out: &mut Vec<T>,
    ) -> Result<(), DecodeError> {
        let mut buffer = Vec::new();
        let span = source
            .read(self.bytes_of(self.offset..end, N), &mut buffer)
            .map_err(|e| DecodeError::Unreadable(e.to_string()))?;
        let (elements, _) = span.as_chunks::<N>();
        let rank = self.shape.len();
        let (inner_len, inner_stride) = (self.shape[rank - 1], self.strides[rank - 1]);
        let mut index = vec![0usize; rank - 1];
        loop {
            // Relative to `offset`, where the span starts.
            let base = index
                .iter()
                .zip(&self.strides)
                .map(|(&i, &s)| i * s)
                .sum::<usize>();
            out.extend((0..inner_len).map(|j| T::from_le(elements[base + j * inner_stride])));
            if !advance(&mut index, &self.shape[..rank - 1]) {
                break;
            }
        }
        if let Some(bad) = T::first_non_finite(out) {
            return Err(DecodeError::NonFinite(bad));
        }
        Ok(())
    }
}

/// Steps `index` to the next position in row-major order within `dims`; false after the last.
fn advance(index: &mut [usize], dims: &[usize]) -> bool {
    for (i, &d) in index.iter_mut().zip(dims).rev() {
        *i += 1;
        if *i < d {
            return true;
        }
        *i = 0;
    }
    false
}

/// An element type a checkpoint stores in `N` little-endian bytes, and how its values are
/// checked (floats for NaN and infinities by [`rotary::finite`], integers not at all).
pub(crate) trait Element<const N: usize>: WithDType {
    /// The value stored as `raw`.
    fn from_le(raw: [u8; N]) -> Self;

    /// The first NaN or infinity among `values`.
    fn first_non_finite(values: &[Self]) -> Option<NonFinite> {
        let _ = values;
        None
    }

    /// The first NaN or infinity among the stored values `raw`.
    fn first_non_finite_stored(raw: &[[u8; N]]) -> Option<NonFinite> {
        let _ = raw;
        None
    }
}

macro_rules! elements {
    (float: $($t:ty, $n:literal);*) => {$(
        impl Element<$n> for $t {
            fn from_le(raw: [u8; $n]) -> Self {
                <$t>::from_le_bytes(raw)
            }

            fn first_non_finite(values: &[Self]) -> Option<NonFinite> {
                finite::first_non_finite(values)
            }

            fn first_non_finite_stored(raw: &[[u8; $n]]) -> Option<NonFinite> {
                finite::first_non_finite_stored::<$t>(raw)
            }
        }
    )*};
    (int: $($t:ty, $n:literal);*) => {$(
        impl Element<$n> for $t {
            fn from_le(raw: [u8; $n]) -> Self {
                <$t>::from_le_bytes(raw)
            }
        }
    )*};
}

elements!(float: f32, 4; f64, 8; f16, 2; bf16, 2);
elements!(int: u8, 1; u32, 4; i16, 2; i32, 4; i64, 8);
