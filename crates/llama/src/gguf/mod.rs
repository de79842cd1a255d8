//! Reading GGUF files (llama.cpp's model format): header, metadata and tensor directory are
//! parsed with every count and offset checked against the file's size (tensor data ranges may
//! not overlap), and tensors are read from the file when asked for (the `file-source` crate:
//! positional reads, not a memory map, so a file truncated during a load is an error and never a SIGBUS), each
//! checked for NaN and infinities as it is read (`finite`).
//!
//! Layout (version 2 and 3): magic `GGUF`, version u32, tensor count u64, metadata count u64;
//! the metadata as (string key, u32 type, value); the tensor directory as (string name, u32
//! dimension count, u64 dimensions innermost first, u32 ggml type, u64 offset); then, from the
//! next multiple of `general.alignment` (default 32), the tensor data.

mod cursor;
mod finite;
mod value;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QTensor};
use candle_core::Device;
use file_source::{AlignedBytes, ReadError, Source};

use crate::error::{LlamaError, Result};
use cursor::Cursor;
pub use value::{Array, Value};

/// Bytes of a GGUF file: borrowed from an in-memory file, or read from disk into a buffer
/// aligned to 8 bytes (as candle's block types need).
pub type TensorBytes<'a> = file_source::Bytes<'a>;

/// `GGUF` read as a little-endian u32.
const MAGIC: u32 = u32::from_le_bytes(*b"GGUF");

/// The alignment of the tensor data when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: usize = 32;

/// ggml tensors have at most this many dimensions.
const MAX_DIMS: usize = 4;

/// The first read of a file's header; a longer header is read again, 4 times as long each
/// time (a 50 k-token vocabulary takes about 2 MiB).
const FIRST_HEADER_READ: usize = 1 << 20;

/// One entry of the tensor directory.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions outermost first (row-major, as candle and PyTorch write them): a matrix of
    /// `rows` rows of `cols` values is `[rows, cols]`. The file stores them innermost first.
    pub shape: Vec<usize>,
    /// The element or block type.
    pub dtype: GgmlDType,
    /// Offset of the first byte from the start of the file.
    pub start: usize,
    /// Size in bytes: `elements / block_size * type_size`.
    pub bytes: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn elements(&self) -> usize {
        // Checked when the directory was read.
        self.shape.iter().product()
    }

    /// Bytes of one row (the innermost dimension), a whole number of blocks.
    pub fn row_bytes(&self) -> usize {
        let cols = self.shape.last().copied().unwrap_or(1);
        cols / self.dtype.block_size() * self.dtype.type_size()
    }
}

/// A parsed GGUF file: its metadata, its tensor directory and its bytes.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    source: Source,
    version: u32,
    metadata: BTreeMap<String, Value>,
    tensors: BTreeMap<String, TensorInfo>,
}

impl GgufFile {
    /// Opens and parses the file at `path`; tensor data is read when asked for.
    ///
    /// # Errors
    /// [`LlamaError::Io`] when the file cannot be opened or is not a regular file (a directory,
    /// a FIFO: refused without waiting for a writer), [`LlamaError::Malformed`] when it is not
    /// a well-formed GGUF file of version 2 or 3, [`LlamaError::FileChanged`] when it shrinks
    /// while its header is read.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let source = Source::open(&path, "a GGUF file").map_err(|source| LlamaError::Io {
            path: path.clone(),
            source,
        })?;
        GgufFile::parse(path, source)
    }

    /// Parses a GGUF file held in memory; `name` stands for its path in messages.
    ///
    /// # Errors
    /// As [`GgufFile::open`].
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile> {
        GgufFile::parse(name.into(), Source::Owned(bytes))
    }

    fn parse(path: PathBuf, source: Source) -> Result<GgufFile> {
        let file_len = source.len();
        let mut prefix = FIRST_HEADER_READ.min(file_len);
        let header = loop {
            let bytes = read(&path, &source, 0..prefix)?;
            let mut cur = Cursor::prefix(&bytes, file_len);
            match Header::read(&mut cur) {
                Ok(header) => break header,
                Err(_) if cur.needs_more() && prefix < file_len => {
                    prefix = prefix.saturating_mul(4).min(file_len);
                }
                Err(e) => return Err(e),
            }
        };
        let mut tensors = BTreeMap::new();
        for (at, entry) in header.directory {
            let info = entry.locate(at, header.data_start, header.alignment, file_len)?;
            if let Some(old) = tensors.insert(info.name.clone(), info) {
                return Err(malformed(
                    at,
                    format!("tensor `{}` appears twice", old.name),
                ));
            }
        }
        refuse_overlaps(&tensors)?;
        Ok(GgufFile {
            path,
            source,
            version: header.version,
            metadata: header.metadata,
            tensors,
        })
    }

    /// The path the file was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// All metadata, by key.
    pub fn metadata(&self) -> &BTreeMap<String, Value> {
        &self.metadata
    }

    /// One metadata value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// The string value of `key`.
    ///
    /// # Errors
    /// [`LlamaError::MissingKey`] when there is none, [`LlamaError::BadValue`] when it is not a
    /// string.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let value = self
            .get(key)
            .ok_or_else(|| LlamaError::MissingKey(key.into()))?;
        value.as_str().ok_or_else(|| LlamaError::BadValue {
            key: key.into(),
            what: format!("a string was expected, the file has {}", value.type_name()),
        })
    }

    /// The tensor directory, by name.
    pub fn tensors(&self) -> &BTreeMap<String, TensorInfo> {
        &self.tensors
    }

    /// The directory entry of tensor `name`.
    ///
    /// # Errors
    /// [`LlamaError::MissingTensor`] when there is none.
    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo> {
        self.tensors
            .get(name)
            .ok_or_else(|| LlamaError::MissingTensor(name.to_string()))
    }

    /// The stored bytes of a tensor, read from the file (their range was checked against the
    /// file's size when the directory was read) and checked in the same pass: every value of
    /// a float tensor, and every block scale of a quantized one, must be finite.
    ///
    /// # Errors
    /// [`LlamaError::NonFiniteWeight`] naming the tensor, the index or block and the value;
    /// [`LlamaError::FileChanged`] when the file has shrunk since it was opened;
    /// [`LlamaError::Io`] when the read fails.
    pub fn tensor_bytes(&self, info: &TensorInfo) -> Result<TensorBytes<'_>> {
        let bytes = read(
            &self.path,
            &self.source,
            info.start..info.start + info.bytes,
        )?;
        if let Some((place, value)) = finite::first_non_finite(info.dtype, &bytes) {
            return Err(LlamaError::NonFiniteWeight {
                name: info.name.clone(),
                place,
                value,
            });
        }
        Ok(bytes)
    }

    /// Tensor `name` as a candle quantized tensor on `device`, its bytes copied out of the file.
    ///
    /// # Errors
    /// [`LlamaError::MissingTensor`], or a candle error from the copy.
    pub fn qtensor(&self, name: &str, device: &Device) -> Result<QTensor> {
        let info = self.tensor_info(name)?;
        qtensor(info, &self.tensor_bytes(info)?, device)
    }
}

/// Builds a candle quantized tensor of `info`'s type and shape from exactly `info.bytes` bytes.
///
/// # Errors
/// [`LlamaError::Malformed`] when `bytes` has the wrong length; a candle error otherwise.
pub fn qtensor(info: &TensorInfo, bytes: &[u8], device: &Device) -> Result<QTensor> {
    if bytes.len() != info.bytes {
        return Err(malformed(
            info.start,
            format!(
                "tensor `{}` needs {} bytes, {} given",
                info.name,
                info.bytes,
                bytes.len()
            ),
        ));
    }
    // candle reads `bytes` as blocks of the type, which need the alignment of their fields: an
    // unaligned slice (only possible for in-memory files) is copied to an aligned buffer first.
    let aligned;
    let bytes = if (bytes.as_ptr() as usize).is_multiple_of(8) {
        bytes
    } else {
        aligned = AlignedBytes::copy(bytes);
        aligned.as_slice()
    };
    Ok(qtensor_from_ggml(
        info.dtype,
        bytes,
        info.shape.clone(),
        device,
    )?)
}

/// Bytes `range` of `source`, the file at `path`.
///
/// # Errors
/// [`LlamaError::FileChanged`] when the file is now shorter than `range.end`, which its size at
/// opening allowed; [`LlamaError::Io`] for other failures.
fn read<'a>(path: &Path, source: &'a Source, range: Range<usize>) -> Result<TensorBytes<'a>> {
    source.read_aligned(range.clone()).map_err(|e| match e {
        ReadError::Io { message, .. } => LlamaError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(message),
        },
        _ => LlamaError::FileChanged {
            path: path.to_path_buf(),
            what: format!(
                "bytes {range:?} lay inside its {} bytes when it was opened, and are now past \
                 its end",
                source.len()
            ),
        },
    })
}

/// What the header says: version, metadata, the tensor directory (not yet located) and where
/// the tensor data starts.
struct Header {
    version: u32,
    metadata: BTreeMap<String, Value>,
    alignment: usize,
    directory: Vec<(usize, Entry)>,
    data_start: usize,
}

impl Header {
    /// Reads the header at the start of `cur`.
    fn read(cur: &mut Cursor<'_>) -> Result<Header> {
        let magic = cur.u32("magic")?;
        if magic != MAGIC {
            return Err(LlamaError::Malformed {
                offset: 0,
                what: format!("the file does not start with `GGUF` (read {magic:#010x})"),
            });
        }
        let version = cur.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(LlamaError::Malformed {
                offset: 4,
                what: format!("GGUF version {version}; versions 2 and 3 are read"),
            });
        }
        // A directory entry takes at least 24 bytes, a metadata entry at least 13.
        let tensor_count = cur.count("tensor count", 24)?;
        let kv_count = cur.count("metadata count", 13)?;
        let mut metadata = BTreeMap::new();
        for _ in 0..kv_count {
            let at = cur.position();
            let key = cur.string("metadata key")?;
            let kind = cur.u32("metadata value type")?;
            let value = Value::read(cur, kind)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(malformed(at, format!("metadata key `{key}` appears twice")));
            }
        }
        let alignment = alignment(&metadata)?;
        let mut directory = Vec::with_capacity(tensor_count);
        for _ in 0..tensor_count {
            directory.push(read_tensor_entry(cur)?);
        }
        let data_start = cur.position().div_ceil(alignment) * alignment;
        Ok(Header {
            version,
            metadata,
            alignment,
            directory,
            data_start,
        })
    }
}

/// Refuses two tensors whose data ranges share a byte (a file that stores one tensor's bytes
/// inside another's is malformed: editing one would change both).
fn refuse_overlaps(tensors: &BTreeMap<String, TensorInfo>) -> Result<()> {
    let mut ranges: Vec<&TensorInfo> = tensors.values().filter(|t| t.bytes > 0).collect();
    ranges.sort_by_key(|t| t.start);
    for pair in ranges.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.start < a.start + a.bytes {
            return Err(malformed(
                b.start,
                format!(
                    "the data of tensor `{}` (bytes {}..{}) overlaps that of tensor `{}` (bytes \
                     {}..{}); every tensor needs its own bytes",
                    b.name,
                    b.start,
                    b.start + b.bytes,
                    a.name,
                    a.start,
                    a.start + a.bytes
                ),
            ));
        }
    }
    Ok(())
}

fn malformed(offset: usize, what: String) -> LlamaError {
    LlamaError::Malformed {
        offset: offset as u64,
        what,
    }
}

/// `general.alignment`: a power of two, 32 when absent.
fn alignment(metadata: &BTreeMap<String, Value>) -> Result<usize> {
    let Some(value) = metadata.get("general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    value
        .as_u64()
        .and_then(|a| usize::try_from(a).ok())
        .filter(|a| a.is_power_of_two())
        .ok_or_else(|| LlamaError::BadValue {
            key: "general.alignment".into(),
            what: format!("{value:?} is not a power of two"),
        })
}

/// A directory entry before its data is located.
struct Entry {
    name: String,
    shape: Vec<usize>,
    dtype: GgmlDType,
    offset: u64,
}

fn read_tensor_entry(cur: &mut Cursor<'_>) -> Result<(usize, Entry)> {
    let at = cur.position();
    let name = cur.string("tensor name")?;
    let n_dims = cur.u32("dimension count")? as usize;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(cur.error(format!(
            "tensor `{name}` has {n_dims} dimensions; 1 to {MAX_DIMS} are allowed"
        )));
    }
    let mut shape = Vec::with_capacity(n_dims);
    for _ in 0..n_dims {
        let d = cur.u64("dimension")?;
        let d = usize::try_from(d)
            .map_err(|_| cur.error(format!("tensor `{name}`: dimension {d} is too large")))?;
        shape.push(d);
    }
    shape.reverse();
    let kind = cur.u32("tensor type")?;
    let dtype = ggml_dtype(kind).ok_or_else(|| {
        cur.error(format!(
            "tensor `{name}` has unknown or unsupported type {kind}"
        ))
    })?;
    let offset = cur.u64("tensor offset")?;
    Ok((
        at,
        Entry {
            name,
            shape,
            dtype,
            offset,
        },
    ))
}

impl Entry {
    /// Checks the entry's size and place and returns its directory record.
    fn locate(
        self,
        at: usize,
        data_start: usize,
        alignment: usize,
        file_len: usize,
    ) -> Result<TensorInfo> {
        let name = &self.name;
        let elements = self
            .shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| {
                malformed(
                    at,
                    format!("tensor `{name}`: {:?} elements overflow", self.shape),
                )
            })?;
        let block = self.dtype.block_size();
        let cols = self.shape.last().copied().unwrap_or(1);
        if cols % block != 0 {
            return Err(malformed(
                at,
                format!(
                    "tensor `{name}`: rows of {cols} values are not whole blocks of {block} ({:?})",
                    self.dtype
                ),
            ));
        }
        let bytes = (elements / block)
            .checked_mul(self.dtype.type_size())
            .ok_or_else(|| malformed(at, format!("tensor `{name}`: its size overflows")))?;
        let offset = usize::try_from(self.offset).ok();
        if offset.is_none_or(|o| o % alignment != 0) {
            return Err(malformed(
                at,
                format!(
                    "tensor `{name}`: offset {} is not a multiple of {alignment}",
                    self.offset
                ),
            ));
        }
        let start = offset.and_then(|o| o.checked_add(data_start));
        let end = start.and_then(|s| s.checked_add(bytes));
        match (start, end) {
            (Some(start), Some(end)) if end <= file_len => Ok(TensorInfo {
                name: self.name,
                shape: self.shape,
                dtype: self.dtype,
                start,
                bytes,
            }),
            _ => Err(malformed(
                at,
                format!(
                    "tensor `{name}` ({bytes} bytes at data offset {}) ends past the end of the \
                     {file_len}-byte file",
                    self.offset
                ),
            )),
        }
    }
}

/// The ggml type with GGUF number `kind`, among the types candle stores.
fn ggml_dtype(kind: u32) -> Option<GgmlDType> {
    Some(match kind {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        9 => GgmlDType::Q8_1,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        15 => GgmlDType::Q8K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}
