//! `torch.save`'s zip format: `<archive>/data.pkl` (a pickle of the state dict whose tensors
//! refer to storages by key) and one uncompressed entry `<archive>/data/<key>` per storage.
//!
//! The archive is read in place: entries are located through the zip directory and their
//! bytes taken as ranges of the file, checked to lie inside it, so a zip that claims more
//! than it holds costs nothing; only the directory, `byteorder` and `data.pkl` are read here.
//! The pickle is read by [`super::pickle`].

use std::collections::BTreeMap;
use std::ops::Range;

use candle_core::DType;
use file_source::{Source, SourceReader};
use zip::{CompressionMethod, ZipArchive};

use super::decode::StoredTensor;
use super::pickle::{self, kind, Id, Pickle, Value};
use super::Entry;

/// The tensors of the `torch.save` archive in `source`.
///
/// # Errors
/// A message for an archive that is not a readable `torch.save` zip: no central directory,
/// no or several `data.pkl`, a compressed or out-of-bounds entry, a big-endian archive, a
/// pickle [`pickle::read`] refuses or one that holds no dict, a read that failed.
pub(crate) fn index(source: &Source) -> Result<BTreeMap<String, Entry>, String> {
    let mut zip = ZipArchive::new(source.reader()).map_err(|e| e.to_string())?;
    let len = source.len();
    let mut buffer = Vec::new();
    let pickles: Vec<String> = zip
        .file_names()
        .filter_map(|n| n.ok())
        .filter(|n| *n == "data.pkl" || n.ends_with("/data.pkl"))
        .map(|n| n.into_owned())
        .collect();
    let [pkl] = pickles.as_slice() else {
        return Err(format!(
            "expected one data.pkl in the archive, found {}",
            pickles.len()
        ));
    };
    let prefix = &pkl[..pkl.len() - "data.pkl".len()];
    if let Ok(order) = entry(&mut zip, len, &format!("{prefix}byteorder")) {
        let order = source.read(order, &mut buffer).map_err(|e| e.to_string())?;
        if order != b"little" {
            return Err(format!(
                "byteorder is {:?}; only little-endian archives are read",
                String::from_utf8_lossy(order)
            ));
        }
    }
    let pkl_range = entry(&mut zip, len, pkl)?;
    let pickle = pickle::read(
        source
            .read(pkl_range, &mut buffer)
            .map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{pkl}: {e}"))?;
    let dict = state_dict(&pickle)?;
    let mut tensors = BTreeMap::new();
    for &(key, value) in dict {
        let Some(Value::Str(name)) = pickle.get(key) else {
            continue;
        };
        let Some(record) = tensor_record(&pickle, value) else {
            continue;
        };
        let record = record.map_err(|e| format!("tensor {name}: {e}"))?;
        let storage = entry(&mut zip, len, &format!("{prefix}data/{}", record.key))
            .map_err(|e| format!("tensor {name}: {e}"))?;
        let shape = record.shape.clone();
        let data = record.into_stored(storage);
        tensors.insert(name.clone(), Entry { shape, data });
    }
    Ok(tensors)
}

/// The byte range of the uncompressed entry `name`, checked to lie inside the archive.
fn entry(
    zip: &mut ZipArchive<SourceReader<'_>>,
    len: usize,
    name: &str,
) -> Result<Range<usize>, String> {
    let index = zip
        .index_for_name(name)
        .ok_or_else(|| format!("the archive has no entry {name}"))?;
    let file = zip
        .by_index_raw(index)
        .map_err(|e| format!("{name}: {e}"))?;
    if file.compression() != CompressionMethod::Stored || file.size() != file.compressed_size() {
        return Err(format!(
            "{name} is compressed ({}); torch.save stores entries uncompressed",
            file.compression()
        ));
    }
    let start = file.data_start().unwrap_or(u64::MAX);
    let end = start.saturating_add(file.size());
    match (usize::try_from(start), usize::try_from(end)) {
        (Ok(start), Ok(end)) if end <= len => Ok(start..end),
        _ => Err(format!(
            "{name} claims {} bytes at offset {start}, past the end of the file ({len} bytes)",
            file.size()
        )),
    }
}

/// The dict the pickle returned (the state dict).
fn state_dict(pickle: &Pickle) -> Result<&[(Id, Id)], String> {
    match pickle.get(pickle.root) {
        Some(Value::Dict(pairs)) => Ok(pairs),
        Some(other) => Err(format!(
            "the pickle holds a {}, not a state dict",
            kind(other)
        )),
        None => Err("the pickle returned nothing".into()),
    }
}

/// A tensor as `torch._utils._rebuild_tensor_v2` describes it.
struct Record {
    key: String,
    dtype: DType,
    /// Elements in the storage, as the persistent id says.
    numel: usize,
    offset: usize,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

impl Record {
    /// The stored tensor over the storage entry at `storage`; an error when the entry is
    /// shorter than the storage's element count says or the dtype is not read.
    fn into_stored(self, storage: Range<usize>) -> Result<StoredTensor, String> {
        let needed = self.numel.checked_mul(self.dtype.size_in_bytes());
        let Some(needed) = needed.filter(|&n| n <= storage.len()) else {
            return Err(format!(
                "storage data/{} holds {} bytes, fewer than its {} {:?} elements",
                self.key,
                storage.len(),
                self.numel,
                self.dtype
            ));
        };
        let stored = StoredTensor {
            dtype: self.dtype,
            shape: self.shape,
            strides: self.strides,
            offset: self.offset,
            storage: storage.start..storage.start + needed,
        };
        stored.check()?;
        Ok(stored)
    }
}

/// The tensor `value` rebuilds: `None` when it is not a tensor, an error when it is one
/// described in a way this reader does not understand.
///
/// Understood: `_rebuild_tensor_v2(storage, offset, size, stride, ...)`, and that call
/// wrapped in `_rebuild_parameter(data, ...)` or `_rebuild_from_type_v2(func, type, args, ...)`.
fn tensor_record(p: &Pickle, mut value: Id) -> Option<Result<Record, String>> {
    loop {
        let (callable, args) = call(p, value)?;
        match callable {
            ("torch._utils", "_rebuild_tensor_v2") => return Some(rebuild_tensor(p, args)),
            // The wrapped tensor was made before the call, so `value` only goes down.
            ("torch._utils", "_rebuild_parameter") => value = *tuple(p, args).ok()?.first()?,
            ("torch._tensor", "_rebuild_from_type_v2") => {
                let parts = tuple(p, args).ok()?;
                let (&func, &inner) = (parts.first()?, parts.get(2)?);
                return match global(p, func)? {
                    ("torch._utils", "_rebuild_tensor_v2") => Some(rebuild_tensor(p, inner)),
                    _ => None,
                };
            }
            _ => return None,
        }
    }
}

/// The global a call is made to and its argument tuple.
fn call(p: &Pickle, id: Id) -> Option<((&str, &str), Id)> {
    match p.get(id)? {
        Value::Reduce { callable, args } => Some((global(p, *callable)?, *args)),
        _ => None,
    }
}

fn global(p: &Pickle, id: Id) -> Option<(&str, &str)> {
    match p.get(id)? {
        Value::Global { module, name } => Some((module, name)),
        _ => None,
    }
}

fn tuple(p: &Pickle, id: Id) -> Result<&[Id], String> {
    match p.get(id) {
        Some(Value::Tuple(items)) => Ok(items),
        other => Err(format!("expected a tuple, found a {}", describe(other))),
    }
}

fn describe(v: Option<&Value>) -> &'static str {
    v.map_or("nothing", kind)
}

fn int(p: &Pickle, id: Id, what: &str) -> Result<usize, String> {
    match p.get(id) {
        Some(&Value::Int(v)) => {
            usize::try_from(v).map_err(|_| format!("{what} is {v}, not a size or index"))
        }
        other => Err(format!("{what} is a {}, not an int", describe(other))),
    }
}

fn ints(p: &Pickle, id: Id, what: &str) -> Result<Vec<usize>, String> {
    tuple(p, id)
        .map_err(|e| format!("{what}: {e}"))?
        .iter()
        .map(|&i| int(p, i, what))
        .collect()
}

/// `_rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks[, ...])`,
/// where `storage` is the persistent id `("storage", <dtype>Storage, key, location, numel)`.
fn rebuild_tensor(p: &Pickle, args: Id) -> Result<Record, String> {
    let args = tuple(p, args)?;
    let [storage, offset, size, stride, ..] = args else {
        return Err(format!(
            "_rebuild_tensor_v2 has {} arguments, expected at least 4",
            args.len()
        ));
    };
    let pid = match p.get(*storage) {
        Some(Value::PersistentId(pid)) => *pid,
        other => return Err(format!("the storage is a {}", describe(other))),
    };
    let pid = tuple(p, pid)?;
    let [_, class, key, _, numel, ..] = pid else {
        return Err(format!(
            "the storage id has {} fields, expected 5",
            pid.len()
        ));
    };
    let Some((_, class)) = global(p, *class) else {
        return Err("the storage type is not a class".into());
    };
    let dtype = match class {
        "FloatStorage" => DType::F32,
        "DoubleStorage" => DType::F64,
        "HalfStorage" => DType::F16,
        "BFloat16Storage" => DType::BF16,
        "ByteStorage" => DType::U8,
        "ShortStorage" => DType::I16,
        "IntStorage" => DType::I32,
        "LongStorage" => DType::I64,
        other => return Err(format!("unsupported storage type {other}")),
    };
    let Some(Value::Str(key)) = p.get(*key) else {
        return Err("the storage key is not a string".into());
    };
    Ok(Record {
        key: key.clone(),
        dtype,
        numel: int(p, *numel, "the storage size")?,
        offset: int(p, *offset, "the storage offset")?,
        shape: ints(p, *size, "the size")?,
        strides: ints(p, *stride, "the stride")?,
    })
}
