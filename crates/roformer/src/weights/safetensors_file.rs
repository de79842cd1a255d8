//! The safetensors format: an 8-byte header length, a JSON header naming each tensor's dtype,
//! shape and byte range, then the data.

use std::collections::{BTreeMap, HashMap};

use candle_core::DType;
use file_source::Source;
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::SafeTensorError;

use super::decode::{row_major, StoredTensor};
use super::Entry;

/// The longest header read, as the `safetensors` crate allows (100 MB).
const MAX_HEADER: usize = 100_000_000;

/// The header as stored: the free-form metadata and the tensors, as the `safetensors` crate
/// reads it.
#[derive(serde::Deserialize)]
struct Header {
    #[serde(rename = "__metadata__")]
    metadata: Option<HashMap<String, String>>,
    #[serde(flatten)]
    tensors: HashMap<String, TensorInfo>,
}

/// The tensors of the safetensors file in `source`.
///
/// Only the header is read. It is validated as the `safetensors` crate does (ranges
/// contiguous and exactly as long as each shape needs, the last one ending where the file
/// ends), with the crate's messages, before anything else is read; the header length is
/// trusted only up to the file's size.
///
/// # Errors
/// The `safetensors` crate's message for a truncated or malformed file.
pub(crate) fn index(source: &Source) -> Result<BTreeMap<String, Entry>, String> {
    let (data_start, metadata) = header(source)?;
    Ok(metadata
        .tensors()
        .into_iter()
        .map(|(name, info)| {
            let (start, end) = info.data_offsets;
            let data = DType::try_from(info.dtype)
                .map(|dtype| StoredTensor {
                    dtype,
                    shape: info.shape.clone(),
                    strides: row_major(&info.shape),
                    offset: 0,
                    storage: data_start + start..data_start + end,
                })
                .map_err(|e| e.to_string());
            let shape = info.shape.clone();
            (name, Entry { shape, data })
        })
        .collect())
}

/// Where the data starts, and the validated header.
fn header(source: &Source) -> Result<(usize, Metadata), String> {
    let mut buffer = Vec::new();
    if source.len() < 8 {
        return Err(SafeTensorError::HeaderTooSmall.to_string());
    }
    let len: [u8; 8] = source
        .read(0..8, &mut buffer)
        .map_err(|e| e.to_string())?
        .try_into()
        .unwrap_or_default();
    let n = usize::try_from(u64::from_le_bytes(len))
        .ok()
        .filter(|&n| n <= MAX_HEADER)
        .ok_or_else(|| SafeTensorError::HeaderTooLarge.to_string())?;
    if 8 + n > source.len() {
        return Err(SafeTensorError::InvalidHeaderLength.to_string());
    }
    let text = source
        .read(8..8 + n, &mut buffer)
        .map_err(|e| e.to_string())?;
    let text =
        std::str::from_utf8(text).map_err(|e| SafeTensorError::InvalidHeader(e).to_string())?;
    let header: Header = serde_json::from_str(text)
        .map_err(|e| SafeTensorError::InvalidHeaderDeserialization(e).to_string())?;
    let mut tensors: Vec<(String, TensorInfo)> = header.tensors.into_iter().collect();
    tensors.sort_by_key(|(_, info)| info.data_offsets);
    let end = tensors.last().map_or(0, |(_, info)| info.data_offsets.1);
    let metadata = Metadata::new(header.metadata, tensors).map_err(|e| e.to_string())?;
    if end.checked_add(8 + n) != Some(source.len()) {
        return Err(SafeTensorError::MetadataIncompleteBuffer.to_string());
    }
    Ok((8 + n, metadata))
}
