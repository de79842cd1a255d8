//! Structure-aware mutations of JSON text: a value replaced by an extreme number, a value of
//! the wrong type or a deeply nested one; entries removed; fields added or written twice;
//! arrays grown; the top-level object turned into an array.
//!
//! The document is parsed, one node is changed, and it is written back; texts JSON has no
//! value for (`1e309`, `NaN`, nesting deeper than the parser's limit) go in as raw text.

use serde_json::Value;

use super::bytes::NUMBERS;
use crate::rng::Rng;

/// A string that marks the node to replace by raw text, as `serde_json` writes it.
const MARK: &str = "\u{0}fuzz\u{0}";
const MARK_WRITTEN: &str = "\"\\u0000fuzz\\u0000\"";

/// Values of the wrong type for most fields, and strings that look like numbers.
const WRONG: &[&str] = &[
    "null",
    "true",
    "false",
    "[]",
    "{}",
    "\"\"",
    "\"NaN\"",
    "\"inf\"",
    "\"-1\"",
    "\"1e308\"",
    "\"gelu\"",
    "\"rms_norm\"",
    "\"linear\"",
    "\"absolute\"",
    "\"[MASK]\"",
    "[1,2,3]",
    "[[]]",
    "[[1,2],[3]]",
    "{\"content\":\"[UNK]\"}",
    "{\"0\":\"a\",\"x\":\"b\"}",
];

/// Nesting depths: under and over serde_json's limit (128), and far past any stack.
const DEPTHS: &[usize] = &[16, 129, 1_000, 100_000];

/// Applies one structure-aware mutation to the JSON document `text`, or returns `None` when
/// `text` is not JSON. `fields` are field names worth adding (the target's known fields).
pub fn mutate(rng: &mut Rng, text: &[u8], fields: &[&str]) -> Option<Vec<u8>> {
    let mut doc: Value = serde_json::from_slice(text).ok()?;
    let mut raw = None;
    match rng.below(8) {
        0 | 1 => raw = Some(replace(rng, &mut doc, NUMBERS)),
        2 => raw = Some(replace(rng, &mut doc, WRONG)),
        3 => {
            mark(rng, &mut doc);
            raw = Some(nested(rng));
        }
        4 => remove_entry(rng, &mut doc),
        5 => grow_array(rng, &mut doc),
        6 => doc = to_array(doc),
        _ => return Some(add_field(rng, text, fields)),
    }
    let written = doc.to_string();
    Some(match raw {
        Some(raw) => written.replacen(MARK_WRITTEN, &raw, 1).into_bytes(),
        None => written.into_bytes(),
    })
}

/// Marks a random node for replacement by one of `texts`, which it returns.
fn replace(rng: &mut Rng, doc: &mut Value, texts: &[&str]) -> String {
    mark(rng, doc);
    rng.pick(texts).to_string()
}

/// An array or object nested to one of [`DEPTHS`].
fn nested(rng: &mut Rng) -> String {
    let depth = *rng.pick(DEPTHS);
    if rng.one_in(2) {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    } else {
        format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
    }
}

/// The JSON pointers of every node of `doc`, root (`""`) first, depth-first.
fn pointers(doc: &Value, at: String, out: &mut Vec<String>) {
    match doc {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let key = key.replace('~', "~0").replace('/', "~1");
                pointers(item, format!("{at}/{key}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// A random node of `doc`, each equally likely.
fn random_node<'a>(rng: &mut Rng, doc: &'a mut Value) -> Option<&'a mut Value> {
    let mut all = Vec::new();
    pointers(doc, String::new(), &mut all);
    let pointer = rng.pick(&all).clone();
    doc.pointer_mut(&pointer)
}

/// Replaces a random node by the marker.
fn mark(rng: &mut Rng, doc: &mut Value) {
    if let Some(node) = random_node(rng, doc) {
        *node = Value::String(MARK.into());
    }
}

/// Removes one entry from a random array or object.
fn remove_entry(rng: &mut Rng, doc: &mut Value) {
    match random_node(rng, doc) {
        Some(Value::Array(items)) if !items.is_empty() => {
            let i = rng.below(items.len());
            items.remove(i);
        }
        Some(Value::Object(map)) if !map.is_empty() => {
            let key = map.keys().nth(rng.below(map.len())).cloned();
            if let Some(key) = key {
                map.remove(&key);
            }
        }
        _ => {}
    }
}

/// Repeats the entries of a random array 2 to 64 times.
fn grow_array(rng: &mut Rng, doc: &mut Value) {
    if let Some(Value::Array(items)) = random_node(rng, doc) {
        let times = 2 + rng.below(63);
        let copy = items.clone();
        for _ in 1..times {
            items.extend(copy.iter().cloned());
        }
    }
}

/// The values of the top-level object as an array (a config written as a list), or any
/// other document wrapped in an array.
fn to_array(doc: Value) -> Value {
    match doc {
        Value::Object(map) => Value::Array(map.into_iter().map(|(_, v)| v).collect()),
        other => Value::Array(vec![other]),
    }
}

/// Writes `"field": value,` right after the first `{`: a new field, or a second copy of one
/// the document has (serde takes the first or rejects the duplicate).
fn add_field(rng: &mut Rng, text: &[u8], fields: &[&str]) -> Vec<u8> {
    let Some(brace) = text.iter().position(|&b| b == b'{') else {
        return text.to_vec();
    };
    let name = if fields.is_empty() {
        "x"
    } else {
        rng.pick(fields)
    };
    let value = if rng.one_in(2) {
        rng.pick(NUMBERS)
    } else {
        rng.pick(WRONG)
    };
    let field = format!("\"{name}\":{value},");
    let mut out = text[..=brace].to_vec();
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(&text[brace + 1..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_json_gives_none() {
        assert!(mutate(&mut Rng::new(1), b"{not json", &[]).is_none());
    }

    #[test]
    fn most_mutations_change_the_document() {
        let seed = br#"{"a": 1, "b": [1, 2, {"c": "d"}], "e": null}"#;
        let mut rng = Rng::new(9);
        let changed = (0..200)
            .filter_map(|_| mutate(&mut rng, seed, &["hidden_size"]))
            .filter(|out| {
                serde_json::from_slice::<Value>(out).ok()
                    != serde_json::from_slice::<Value>(seed).ok()
            })
            .count();
        assert!(changed > 150, "{changed}");
    }

    #[test]
    fn raw_texts_replace_the_mark() {
        let mut rng = Rng::new(2);
        for _ in 0..100 {
            let out = mutate(&mut rng, br#"{"a": [1, 2]}"#, &[]).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(!text.contains("fuzz"), "{text}");
        }
    }
}
