//! Structure-aware mutations of a safetensors file: its JSON header's shapes, dtypes, data
//! offsets and names rewritten with extremes, tensors added or removed, and the header's
//! length field set to extremes.
//!
//! The layout: an 8-byte little-endian header length `n`, `n` bytes of JSON
//! (`{"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}`), then the
//! data.

use serde_json::{json, Map, Value};

use crate::rng::Rng;

/// Shape and offset values: zero, one, the edges of 32 and 64 bits, and values whose product
/// overflows.
const SIZES: &[u64] = &[
    0,
    1,
    2,
    3,
    97,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    1 << 40,
    1 << 62,
    0x7fff_ffff_ffff_ffff,
    u64::MAX,
];

/// Every dtype name safetensors knows, and some it does not.
const DTYPES: &[&str] = &[
    "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "U16", "U32", "U64", "BOOL",
    "F8_E4M3", "F8_E5M2", "F4", "C64", "XYZ", "",
];

/// Names of tensors the models ask for, for renames and additions.
const NAMES: &[&str] = &[
    "roformer.embeddings.word_embeddings.weight",
    "embeddings.word_embeddings.weight",
    "roformer.encoder.embed_positions.weight",
    "cls.predictions.bias",
    "cls.predictions.decoder.weight",
    "roformer.encoder.layer.0.attention.self.query.weight",
    "bert.embeddings.word_embeddings.weight",
    "__metadata__",
    "",
];

/// Applies one header-aware mutation to safetensors bytes, or returns `None` when `data` has
/// no parseable header.
pub fn mutate(rng: &mut Rng, data: &[u8]) -> Option<Vec<u8>> {
    let (mut header, body) = split(data)?;
    if rng.one_in(6) {
        return Some(with_length(rng, data));
    }
    let names: Vec<String> = header
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    if names.is_empty() {
        header.insert(rng.pick(NAMES).to_string(), random_entry(rng));
        return Some(join(&header, body));
    }
    let name = rng.pick(&names).clone();
    match rng.below(7) {
        0 | 1 => set_shape(rng, &mut header, &name),
        2 => set_dtype(rng, &mut header, &name),
        3 | 4 => set_offsets(rng, &mut header, &name, body.len() as u64),
        5 => rename(rng, &mut header, &name),
        _ => {
            if rng.one_in(2) {
                header.remove(&name);
            } else {
                header.insert(rng.pick(NAMES).to_string(), random_entry(rng));
            }
        }
    }
    Some(join(&header, body))
}

/// The header as an object and the data after it.
fn split(data: &[u8]) -> Option<(Map<String, Value>, &[u8])> {
    let len = u64::from_le_bytes(data.get(..8)?.try_into().ok()?);
    let end = usize::try_from(len).ok()?.checked_add(8)?;
    let header = serde_json::from_slice(data.get(8..end)?).ok()?;
    Some((header, &data[end..]))
}

fn join(header: &Map<String, Value>, body: &[u8]) -> Vec<u8> {
    let text = Value::Object(header.clone()).to_string();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(body);
    out
}

/// The same file with the header length field set to an extreme or off by a little.
fn with_length(rng: &mut Rng, data: &[u8]) -> Vec<u8> {
    let len = u64::from_le_bytes(data[..8].try_into().unwrap_or([0; 8]));
    let value = match rng.below(4) {
        0 => *rng.pick(SIZES),
        1 => len.wrapping_add(1),
        2 => len.wrapping_sub(1),
        _ => data.len() as u64,
    };
    let mut out = data.to_vec();
    out[..8].copy_from_slice(&value.to_le_bytes());
    out
}

fn size(rng: &mut Rng) -> Value {
    if rng.one_in(8) {
        json!(-1)
    } else {
        json!(*rng.pick(SIZES))
    }
}

fn set_shape(rng: &mut Rng, header: &mut Map<String, Value>, name: &str) {
    let Some(Value::Object(entry)) = header.get_mut(name) else {
        return;
    };
    let shape = match rng.below(4) {
        0 => Value::Array(vec![]),
        1 => Value::Array((0..rng.length(8)).map(|_| size(rng)).collect()),
        _ => {
            let mut dims = entry
                .get("shape")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if dims.is_empty() {
                dims.push(json!(1));
            }
            let i = rng.below(dims.len());
            dims[i] = size(rng);
            Value::Array(dims)
        }
    };
    entry.insert("shape".into(), shape);
}

fn set_dtype(rng: &mut Rng, header: &mut Map<String, Value>, name: &str) {
    if let Some(Value::Object(entry)) = header.get_mut(name) {
        entry.insert("dtype".into(), json!(rng.pick(DTYPES)));
    }
}

fn set_offsets(rng: &mut Rng, header: &mut Map<String, Value>, name: &str, body_len: u64) {
    let Some(Value::Object(entry)) = header.get_mut(name) else {
        return;
    };
    let offsets = entry
        .get("data_offsets")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>())
        .unwrap_or_default();
    let (begin, end) = match offsets[..] {
        [b, e] => (b, e),
        _ => (0, 0),
    };
    let new = match rng.below(5) {
        0 => json!([end, begin]),
        1 => json!([begin, body_len + 1 + rng.below(64) as u64]),
        2 => json!([size(rng), size(rng)]),
        3 => json!([begin, begin]),
        _ => json!([begin]),
    };
    entry.insert("data_offsets".into(), new);
}

fn rename(rng: &mut Rng, header: &mut Map<String, Value>, name: &str) {
    if let Some(entry) = header.remove(name) {
        let new = match rng.below(3) {
            0 => rng.pick(NAMES).to_string(),
            1 => format!("roformer.{name}"),
            _ => name.trim_start_matches("roformer.").to_string(),
        };
        header.insert(new, entry);
    }
}

/// A tensor entry with random dtype, shape and offsets.
fn random_entry(rng: &mut Rng) -> Value {
    json!({
        "dtype": rng.pick(DTYPES),
        "shape": (0..rng.below(4)).map(|_| size(rng)).collect::<Vec<_>>(),
        "data_offsets": [size(rng), size(rng)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, body: &[u8]) -> Vec<u8> {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn mutated_headers_stay_parseable_and_keep_the_data() {
        let body = [7u8; 16];
        let seed = file(
            r#"{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#,
            &body,
        );
        let mut rng = Rng::new(4);
        let mut changed = 0;
        for _ in 0..300 {
            let out = mutate(&mut rng, &seed).unwrap();
            if let Some((_, rest)) = split(&out) {
                assert_eq!(rest, body);
            }
            changed += usize::from(out != seed);
        }
        assert!(changed > 250, "{changed}");
    }

    #[test]
    fn garbage_gives_none() {
        assert!(mutate(&mut Rng::new(1), b"\x05\0\0\0\0\0\0\0abc").is_none());
    }
}
