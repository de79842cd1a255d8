//! The safetensors format: an 8-byte header length, a JSON header naming each tensor's dtype,
//! shape and byte range, then the data.

use std::collections::BTreeMap;

use candle_core::DType;
use safetensors::SafeTensors;

use super::decode::{row_major, StoredTensor};
use super::Entry;

/// The tensors of a safetensors file held in `bytes`.
///
/// The header is validated by the `safetensors` crate (ranges contiguous, inside the file and
/// exactly as long as each shape needs) before anything else is read.
///
/// # Errors
/// The `safetensors` crate's message for a truncated or malformed file.
pub(crate) fn index(bytes: &[u8]) -> Result<BTreeMap<String, Entry>, String> {
    let (header, metadata) = SafeTensors::read_metadata(bytes).map_err(|e| e.to_string())?;
    let data_start = 8 + header;
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
