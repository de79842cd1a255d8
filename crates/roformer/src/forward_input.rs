//! The inputs of one forward pass as a JSON file holds them (`roformer forward --input`, and
//! the fuzzer's `input` target): lists of equal-length lists of integers, turned into the
//! `[batch, seq]` tensors the models' `forward` takes. The models check the values themselves
//! (ids in the vocabulary, a 0/1 mask, ...); this type checks only the lists' shapes.

use candle_core::{Device, Tensor};

use crate::error::{ModelError, Result};

/// The input file of `roformer forward`: `input_ids` (one list of ids per sequence), and
/// optionally `attention_mask` (1 attend, 0 padding), `token_type_ids` and `position_ids`
/// (the rotary position of each token; default `0, 1, ...` per sequence), each of the same
/// shape. Unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardInput {
    /// Token ids, one list per sequence.
    pub input_ids: Vec<Vec<i64>>,
    /// 1 for a token, 0 for padding; `None`: every token attends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_mask: Option<Vec<Vec<i64>>>,
    /// Segment ids; `None`: all 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_type_ids: Option<Vec<Vec<i64>>>,
    /// Positions; `None`: `0, 1, ...` per sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_ids: Option<Vec<Vec<i64>>>,
}

/// A [`ForwardInput`] as `[batch, seq]` i64 tensors on the CPU, in the order of the models'
/// `forward(ids, types, mask, positions)`.
#[derive(Debug, Clone)]
pub struct ForwardTensors {
    /// Token ids.
    pub input_ids: Tensor,
    /// Segment ids.
    pub token_type_ids: Option<Tensor>,
    /// The 0/1 attention mask.
    pub attention_mask: Option<Tensor>,
    /// Positions.
    pub position_ids: Option<Tensor>,
}

impl ForwardInput {
    /// The input's field names, as the file spells them.
    pub const FIELDS: &'static [&'static str] = &[
        "input_ids",
        "attention_mask",
        "token_type_ids",
        "position_ids",
    ];

    /// Parses the JSON text of an input file.
    ///
    /// # Errors
    /// serde's error for malformed JSON, a field of the wrong type, a missing `input_ids` or an
    /// unknown field.
    pub fn from_json(bytes: &[u8]) -> serde_json::Result<ForwardInput> {
        serde_json::from_slice(bytes)
    }

    /// The lists as tensors.
    ///
    /// # Errors
    /// [`ModelError::Input`] for a list with no sequence, a sequence with no token, or
    /// sequences of different lengths (naming the list and the row).
    pub fn tensors(&self) -> Result<ForwardTensors> {
        let optional = |name: &str, rows: &Option<Vec<Vec<i64>>>| {
            rows.as_deref().map(|r| matrix(name, r)).transpose()
        };
        Ok(ForwardTensors {
            input_ids: matrix("input_ids", &self.input_ids)?,
            token_type_ids: optional("token_type_ids", &self.token_type_ids)?,
            attention_mask: optional("attention_mask", &self.attention_mask)?,
            position_ids: optional("position_ids", &self.position_ids)?,
        })
    }
}

/// A `[rows, cols]` i64 tensor from a list of lists, which must be rectangular and non-empty.
fn matrix(name: &str, rows: &[Vec<i64>]) -> Result<Tensor> {
    let Some(first) = rows.first() else {
        return Err(ModelError::Input(format!(
            "{name} is empty: give at least one sequence"
        )));
    };
    let width = first.len();
    if width == 0 {
        return Err(ModelError::Input(format!(
            "{name}[0] is empty: give at least one token per sequence"
        )));
    }
    if let Some((i, row)) = rows.iter().enumerate().find(|(_, r)| r.len() != width) {
        return Err(ModelError::Input(format!(
            "{name} is ragged: row {i} has {} entries, row 0 has {width} (pad the rows to one \
             length and mark the padding in attention_mask)",
            row.len()
        )));
    }
    let flat: Vec<i64> = rows.iter().flatten().copied().collect();
    Ok(Tensor::from_vec(flat, (rows.len(), width), &Device::Cpu)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_become_tensors_and_bad_shapes_are_named() {
        let input = ForwardInput::from_json(
            br#"{"input_ids": [[2, 5, 7], [2, 9, 0]], "attention_mask": [[1, 1, 1], [1, 1, 0]]}"#,
        )
        .unwrap();
        let t = input.tensors().unwrap();
        assert_eq!(t.input_ids.dims(), [2, 3]);
        assert_eq!(
            t.attention_mask.unwrap().to_vec2::<i64>().unwrap()[1],
            [1, 1, 0]
        );
        assert!(t.token_type_ids.is_none() && t.position_ids.is_none());
        for (json, want) in [
            (r#"{"input_ids": []}"#, "input_ids is empty"),
            (r#"{"input_ids": [[]]}"#, "input_ids[0] is empty"),
            (
                r#"{"input_ids": [[1]], "position_ids": [[0], [1, 2]]}"#,
                "position_ids is ragged: row 1 has 2 entries",
            ),
        ] {
            let err = ForwardInput::from_json(json.as_bytes())
                .unwrap()
                .tensors()
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{json}: {err}");
        }
        let every = ForwardInput {
            input_ids: vec![vec![1]],
            attention_mask: Some(vec![vec![1]]),
            token_type_ids: Some(vec![vec![0]]),
            position_ids: Some(vec![vec![0]]),
        };
        let json = serde_json::to_value(&every).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut fields = ForwardInput::FIELDS.to_vec();
        fields.sort_unstable();
        assert_eq!(keys, fields);
        let unknown = ForwardInput::from_json(br#"{"input_ids": [[1]], "ids": [[1]]}"#);
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
    }
}
